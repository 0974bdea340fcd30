package store

import "github.com/lesfarm/lesfarm/coordinator/fit"

// buildNeedsJoin joins, to a query over queued runs aliased q, what each
// run's build asks of a device (fit.BuildNeeds): bk.kind is ”
// when the build is empty or not registered (any device runs such a run
// with its embedded runtime), and bk.platforms lists an exec build's
// platforms. Builds are immutable, so these never change under a run.
const buildNeedsJoin = ` LEFT JOIN LATERAL (SELECT b.kind,
		array(SELECT e.platform FROM build_executables e WHERE e.build_id = b.id ORDER BY e.platform) AS platforms
		FROM builds b WHERE b.id = q.build) bk ON true`

// buildNeedsCols are the columns buildNeedsJoin adds, for scanNeeds.
const buildNeedsCols = `q.build, coalesce(bk.kind, ''), coalesce(bk.platforms, '{}')`

// buildRunnableSQL is the SQL form of fit.BuildMatch for runs r and
// a device whose exec platform and embedded build are the parameters
// execParam and embeddedParam: the prefilter of Candidates.
func buildRunnableSQL(execParam, embeddedParam string) string {
	return `(NOT EXISTS (SELECT 1 FROM builds b WHERE b.id = r.build)
		OR EXISTS (SELECT 1 FROM build_executables e WHERE e.build_id = r.build AND e.kind = 'exec' AND e.platform = ` + execParam + `)
		OR (r.build = ` + embeddedParam + ` AND EXISTS (SELECT 1 FROM builds b WHERE b.id = r.build AND b.kind = 'embedded')))`
}

// needsOf turns a scanned build kind and platforms into the candidate's
// needs (nil for a run any device may take).
func needsOf(kind string, platforms []string) *fit.BuildNeeds {
	switch kind {
	case "embedded":
		return &fit.BuildNeeds{Embedded: true}
	case "exec":
		return &fit.BuildNeeds{Platforms: platforms}
	}
	return nil
}
