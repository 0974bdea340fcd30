package expert

// Resident implements moe.Residency: whether expert x of layer is held
// or already queued or being read, so that using it adds no read. In the
// naive mode (a page cache, no expert entries) it always reports true,
// so a caller never drops work for it.
func (s *Store) Resident(layer, x int) bool {
	if s.pages != nil {
		return true
	}
	s.mu.Lock()
	_, ok := s.cache.entries[Key{int32(layer), int32(x)}]
	s.mu.Unlock()
	return ok
}
