package agent

// pageCacheEviction is what evictModel did to a model file's pages in the
// page cache before a config: the share of the file's pages resident
// before and after (mincore), when they could be measured.
type pageCacheEviction struct {
	before, after float64
	measured      bool
}

// record adds the eviction to a config result's extra metrics:
// page_cache_evicted (1: the runner dropped the model's cached pages) and,
// where measured, model_resident_before_evict and
// model_resident_after_evict (the share of the model's pages in the page
// cache, 0 to 1).
func (e pageCacheEviction) record(extra map[string]float64) {
	extra["page_cache_evicted"] = 1
	if e.measured {
		extra["model_resident_before_evict"] = e.before
		extra["model_resident_after_evict"] = e.after
	}
}
