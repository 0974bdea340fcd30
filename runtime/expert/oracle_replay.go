package expert

// oracleStrategy is the oracle mode: it replays the recorded trace's plan
// (Belady's reads, each started as early as its victims allow) and
// computes ready-first. When the store stops matching the plan (a read
// failed, demand cancelled a scheduled read, the budget holds more than
// the plan says) it drops the plan and serves demand with Belady eviction.
type oracleStrategy struct {
	demandLoop
	oracle   *Oracle
	plan     *OraclePlan // the oracle's reads; nil once it no longer applies
	planNext int         // index of the next read of plan to issue
}

func (*oracleStrategy) speculative() bool                  { return false }
func (*oracleStrategy) serial() bool                       { return false }
func (*oracleStrategy) pick(firstReady, _ int, _ bool) int { return firstReady }
func (o *oracleStrategy) planned() bool                    { return o.plan != nil }
func (o *oracleStrategy) err() error                       { return o.oracle.Err() }

func (o *oracleStrategy) abandon() bool {
	had := o.plan != nil
	o.plan = nil
	return had
}

// scheduleLocked issues the plan's reads in order, each as soon as its
// victims have had their last use before it and are evictable.
func (o *oracleStrategy) scheduleLocked(s *Store) {
	if o.plan == nil {
		return
	}
	queued := 0
	defer func() { s.q.wakeLocked(queued) }()
	for o.planNext < len(o.plan.fetches) {
		f := &o.plan.fetches[o.planNext]
		if f.after >= o.oracle.pos {
			return // a victim is still to be demanded
		}
		for _, v := range f.victims {
			if e := s.cache.entries[v]; e != nil && !s.cache.evictable(e) {
				return // still being computed
			}
		}
		for _, v := range f.victims {
			if e := s.cache.entries[v]; e != nil {
				s.cache.evict(e)
			}
		}
		if _, ok := s.cache.entries[f.key]; ok {
			o.planNext++
			continue
		}
		buf, ok := s.cache.alloc(s.bufSize[f.key.Layer], func(*entry) bool { return false })
		if !ok {
			// The store holds more than the plan says (it diverged):
			// serve demand with Belady eviction from here on.
			o.plan = nil
			s.log.Warn("expert: oracle: budget does not match the plan; continuing with Belady eviction on demand")
			return
		}
		e := &entry{key: f.key, buf: buf, state: stQueued, target: int(f.key.Layer)}
		s.cache.entries[f.key] = e
		s.q.pushSpecLocked(e)
		queued++
		o.planNext++
	}
}
