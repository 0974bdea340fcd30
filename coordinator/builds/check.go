package builds

import (
	"regexp"
	"slices"
	"strings"
)

// Executable is one executable offered for a build: the platform it is
// declared for, its content digest and what Inspect read from it.
type Executable struct {
	Platform string
	SHA256   string
	Info     *Info
}

// Summary is what Check concludes about a build's executables.
type Summary struct {
	// GitSHA is the sha to record: the executables' vcs.revision when one
	// is stamped (it extends a short --git-sha), else the --git-sha given,
	// else "".
	GitSHA string
	// Revision is the executables' common vcs.revision ("" when none is
	// stamped).
	Revision string
	// Dirty is true when some executable was built from a modified tree.
	Dirty bool
}

// MinGitSHALen is the shortest --git-sha accepted (git's own minimum
// abbreviation).
const MinGitSHALen = 4

var (
	gitSHARE = regexp.MustCompile(`^[0-9a-f]{4,64}$`)
	// platformRE is protocol.ValidPlatform's rule, repeated because this
	// package must not import protocol (which links runtime/units).
	platformRE = regexp.MustCompile(`^[a-z0-9]{1,16}/[a-z0-9]{1,16}$`)
)

// Check holds a build's executables against each other and against the
// git sha the pusher claims (empty: none): at least one executable, one
// per platform, each a binary of the platform it is declared for (its
// GOOS/GOARCH), all stamped with the same vcs.revision (executables
// without one are taken as they are), and that revision starting with
// gitSHA. Every refusal wraps ErrRefused and is one line.
func Check(gitSHA string, exes []Executable) (*Summary, error) {
	if len(exes) == 0 {
		return nil, refusef("a build needs at least one executable")
	}
	if gitSHA != "" && !gitSHARE.MatchString(gitSHA) {
		return nil, refusef("git sha %q is not %d to 64 lowercase hex digits", clip(gitSHA), MinGitSHALen)
	}
	sum := &Summary{}
	seen := map[string]bool{}
	var revs []string // "platform at revision", for the message
	for _, e := range exes {
		switch {
		case !platformRE.MatchString(e.Platform):
			return nil, refusef("platform %q is not GOOS/GOARCH (e.g. linux/arm64)", clip(e.Platform))
		case seen[e.Platform]:
			return nil, refusef("two executables for platform %s", e.Platform)
		case e.Info == nil:
			return nil, refusef("executable for %s was not inspected", e.Platform)
		case e.Info.Platform != e.Platform:
			return nil, refusef("executable for %s is a %s binary (GOOS/GOARCH of its build information)", e.Platform, e.Info.Platform)
		}
		seen[e.Platform] = true
		sum.Dirty = sum.Dirty || e.Info.Modified
		if r := e.Info.Revision; r != "" {
			if sum.Revision != "" && r != sum.Revision {
				revs = append(revs, e.Platform+" at "+short(r))
				return nil, refusef("executables built from different revisions: %s", strings.Join(revs, ", "))
			}
			sum.Revision = r
			revs = append(revs, e.Platform+" at "+short(r))
		}
	}
	if gitSHA != "" && sum.Revision != "" && !strings.HasPrefix(sum.Revision, gitSHA) {
		return nil, refusef("git sha %s contradicts the executables' vcs.revision %s", gitSHA, sum.Revision)
	}
	sum.GitSHA = gitSHA
	if sum.Revision != "" && len(sum.Revision) <= 64 && gitSHARE.MatchString(sum.Revision) {
		sum.GitSHA = sum.Revision
	}
	return sum, nil
}

// short abbreviates a revision to 12 characters for messages.
func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// Nearest returns up to n of candidates closest to id, for "did you
// mean" answers: those within a small edit distance of id (ignoring
// case; at most max(2, len(id)/3) edits) or containing id, closest first.
// Candidates of equal distance keep their order, so a caller listing the
// newest first gets the newest of equally close ids first.
func Nearest(id string, candidates []string, n int) []string {
	if n <= 0 || id == "" {
		return nil
	}
	q := strings.ToLower(id)
	limit := max(2, len(q)/3)
	type scored struct {
		id   string
		dist int
	}
	var out []scored
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if c == id {
			continue
		}
		d := editDistance(q, lc, limit+1)
		if d > limit && strings.Contains(lc, q) {
			d = limit
		}
		if d <= limit {
			out = append(out, scored{c, d})
		}
	}
	slices.SortStableFunc(out, func(a, b scored) int { return a.dist - b.dist })
	ids := make([]string, 0, min(n, len(out)))
	for _, s := range out[:min(n, len(out))] {
		ids = append(ids, s.id)
	}
	return ids
}

// editDistance is the Levenshtein distance of a and b in bytes, or bound
// when it is at least bound (the rows stop early).
func editDistance(a, b string, bound int) int {
	if d := len(a) - len(b); d >= bound || -d >= bound {
		return bound
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= bound {
			return bound
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], bound)
}
