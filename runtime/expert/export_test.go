package expert

// SettleReadsForTest waits until no read of layer's experts is queued or in
// flight in s (each has completed, failed or was never issued), so a test
// can make a prefetch complete before the Use that demands it.
func SettleReadsForTest(s *Store, layer int, experts []int) {
	settleReads(s, layer, experts)
}

// settleReads is SettleReadsForTest. It waits on the read queue's done
// signal, which every completed read sends after its state is set under
// the lock, so no completion is missed between a check and the wait.
func settleReads(s *Store, layer int, experts []int) {
	for {
		s.mu.Lock()
		busy := false
		for _, x := range experts {
			if e := s.cache.entries[Key{int32(layer), int32(x)}]; e != nil && (e.state == stQueued || e.state == stReading) {
				busy = true
			}
		}
		s.mu.Unlock()
		if !busy {
			return
		}
		<-s.q.done
	}
}
