package api

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
)

// TestBisectConcurrentRequests: several requests to bisect one alert
// group at the same moment, over real HTTP: exactly one starts a
// bisection (201) and every other gets 409 naming it, as one line of
// problem+json; the database holds one running bisection of the group.
func TestBisectConcurrentRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	builds := []string{"cc-1", "cc-2", "cc-3", "cc-4"}
	buildstest.Register(t, e.st, builds...)
	bisectDevice(t, e.st, "cc-host")
	gid := seedAlert(t, e.st, builds, 2, 0, 3)
	const n = 6
	type answer struct {
		code        int
		ctype, body string
		err         error
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/v1/alerts/%d/bisect", e.srv.URL, gid), strings.NewReader(`{}`))
			if err != nil {
				answers[i].err = err
				return
			}
			req.Header.Set("Authorization", "Bearer "+e.token)
			req.Header.Set("Content-Type", "application/json")
			<-start
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers[i].err = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			answers[i] = answer{code: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: string(b), err: err}
		}()
	}
	close(start)
	wg.Wait()
	created, conflicts := 0, 0
	for _, a := range answers {
		if a.err != nil {
			t.Fatal(a.err)
		}
		switch a.code {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
			p := decodeProblem(t, a.ctype, []byte(a.body))
			if !strings.Contains(p.Detail, fmt.Sprintf("of alert group %d is running", gid)) || strings.Contains(p.Detail, "\n") {
				t.Errorf("409 detail %q", p.Detail)
			}
			conflicts++
		default:
			t.Errorf("answer %d: %s", a.code, a.body)
		}
	}
	var running int
	if err := e.st.Pool().QueryRow(t.Context(), `SELECT count(*) FROM bisections WHERE group_id = $1 AND state = 'running'`, gid).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if created != 1 || conflicts != n-1 || running != 1 {
		t.Fatalf("%d created, %d conflicts, %d running; want 1, %d, 1", created, conflicts, running, n-1)
	}
}
