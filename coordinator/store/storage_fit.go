package store

// noRoomSQL is the condition "run's model is downloaded (no local path)
// and larger than the room for artifacts the device reported in its
// hello" (fingerprint free_storage_bytes), over SQL expressions for the
// run and device ids. ClaimRun treats such a run as unfit for the device
// (issue 29, finding 10): a device whose disk cannot hold the model failed
// every run it took within seconds, each blamed on its build. A device
// that reported no figure is not held back.
func noRoomSQL(run, device string) string {
	return `EXISTS (SELECT 1 FROM runs nr JOIN jobs nj ON nj.id = nr.job_id, devices nd
		WHERE nr.id = ` + run + ` AND nd.id = ` + device + `
		  AND jsonb_typeof(nd.fingerprint->'free_storage_bytes') = 'number'
		  AND jsonb_typeof(nj.spec->'model'->'size') = 'number'
		  AND coalesce(nj.spec->'model'->>'path', '') = ''
		  AND (nj.spec->'model'->>'size')::numeric > (nd.fingerprint->>'free_storage_bytes')::numeric)`
}
