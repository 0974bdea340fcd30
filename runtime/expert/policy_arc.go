package expert

import "container/list"

// BudgetedPolicy is a Policy that needs the cache's size: the store and
// ReplayCache call SetBudget once, before any other method, with the budget
// in bytes and the bytes of one expert per layer (0 for layers without
// experts). It returns an error when the policy cannot work with them.
type BudgetedPolicy interface {
	Policy
	SetBudget(budget int64, expertBytes []int64) error
}

// configurePolicy calls SetBudget when p needs it.
func configurePolicy(p Policy, budget int64, expertBytes []int64) error {
	if bp, ok := p.(BudgetedPolicy); ok {
		return bp.SetBudget(budget, expertBytes)
	}
	return nil
}

// capacityOf returns how many experts of average size fit in budget.
func capacityOf(budget int64, expertBytes []int64) int {
	var sum, n int64
	for _, b := range expertBytes {
		if b > 0 {
			sum += b
			n++
		}
	}
	if sum == 0 {
		return 0
	}
	return int(budget * n / sum)
}

// arc is Adaptive Replacement Cache (Megiddo and Modha, FAST 2003): two LRU
// lists of resident keys, t1 (seen once recently) and t2 (seen at least
// twice), and two ghost lists of keys recently evicted from each, b1 and
// b2. A demand that finds its key in a ghost list moves the target size p
// of t1 towards the list that would have kept it, so the policy adapts
// between recency and frequency. The capacity c (in experts) comes from
// SetBudget, or else from the most keys ever resident.
type arc struct {
	c      int
	p      float64
	t1, t2 *list.List // resident: front is most recent
	b1, b2 *list.List // ghosts
	where  map[Key]*arcNode
	// promote: demanded while not resident but found in a ghost list, so
	// its Insert goes to t2.
	promote map[Key]bool
	lastB2  bool // the latest adapting demand hit b2
	maxRes  int
}

type arcNode struct {
	list *list.List
	el   *list.Element
}

func newARC() *arc {
	return &arc{t1: list.New(), t2: list.New(), b1: list.New(), b2: list.New(), where: map[Key]*arcNode{}, promote: map[Key]bool{}}
}

func (p *arc) Name() string { return "arc" }

// SetBudget implements BudgetedPolicy.
func (p *arc) SetBudget(budget int64, expertBytes []int64) error {
	p.c = capacityOf(budget, expertBytes)
	return nil
}

func (p *arc) capacity() int { return max(p.c, p.maxRes, 1) }

func (p *arc) move(k Key, to *list.List) {
	if n := p.where[k]; n != nil {
		n.list.Remove(n.el)
	}
	p.where[k] = &arcNode{list: to, el: to.PushFront(k)}
}

func (p *arc) drop(k Key) {
	if n := p.where[k]; n != nil {
		n.list.Remove(n.el)
		delete(p.where, k)
	}
}

func (p *arc) Access(k Key) {
	n := p.where[k]
	switch {
	case n == nil:
	case n.list == p.t1 || n.list == p.t2:
		p.move(k, p.t2)
	case n.list == p.b1:
		p.p = min(float64(p.capacity()), p.p+max(float64(p.b2.Len())/float64(max(p.b1.Len(), 1)), 1))
		p.drop(k)
		p.promote[k] = true
		p.lastB2 = false
	case n.list == p.b2:
		p.p = max(0, p.p-max(float64(p.b1.Len())/float64(max(p.b2.Len(), 1)), 1))
		p.drop(k)
		p.promote[k] = true
		p.lastB2 = true
	}
}

func (p *arc) Insert(k Key) {
	if n := p.where[k]; n != nil && (n.list == p.t1 || n.list == p.t2) {
		return
	}
	if p.promote[k] {
		delete(p.promote, k)
		p.move(k, p.t2)
	} else {
		p.move(k, p.t1)
	}
	p.maxRes = max(p.maxRes, p.t1.Len()+p.t2.Len())
}

func (p *arc) Remove(k Key) {
	n := p.where[k]
	if n == nil {
		return
	}
	switch n.list {
	case p.t1:
		p.move(k, p.b1)
	case p.t2:
		p.move(k, p.b2)
	default:
		return
	}
	c := p.capacity()
	for p.b1.Len() > 0 && p.t1.Len()+p.b1.Len() > c {
		p.drop(p.b1.Back().Value.(Key))
	}
	for p.b2.Len() > 0 && p.t1.Len()+p.t2.Len()+p.b1.Len()+p.b2.Len() > 2*c {
		p.drop(p.b2.Back().Value.(Key))
	}
}

func (p *arc) Victim(evictable func(Key) bool) (Key, bool) {
	first, second := p.t2, p.t1
	if t1 := float64(p.t1.Len()); t1 > 0 && (t1 > p.p || (p.lastB2 && t1 == p.p)) {
		first, second = p.t1, p.t2
	}
	for _, l := range []*list.List{first, second} {
		for el := l.Back(); el != nil; el = el.Prev() {
			if k := el.Value.(Key); evictable(k) {
				return k, true
			}
		}
	}
	return Key{}, false
}
