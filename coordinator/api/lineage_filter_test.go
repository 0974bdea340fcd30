package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestLineageStarMeansEvery: every list the dashboard filters by lineage
// (runs, alerts, series, builds) reads lineage=* as every lineage, the
// same as no lineage (runs answered 200 with nothing, alerts 422), and
// refuses a name the store would refuse with 422 at query.lineage.
func TestLineageStarMeansEvery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addDevice(t, e.st, "p1", "android", "Pixel 8", nil)
	buildstest.Register(t, e.st, "rc-1", "b1")
	for _, body := range []map[string]any{{"suite": "smoke", "build": "rc-1", "lineage": "release-1"}, {"suite": "smoke", "build": "b1"}} {
		if resp := e.api.Post("/v1/runs", e.auth(), body); resp.Code != http.StatusCreated {
			t.Fatalf("trigger: %d %s", resp.Code, resp.Body)
		}
	}
	for i, lin := range []string{"main", "release-1"} {
		if _, err := e.st.Pool().Exec(t.Context(), `INSERT INTO alert_groups (suite, lineage, seq, build, scope, summary, regression)
			VALUES ('smoke', $1, $2, 'b1', 'global', 'decode_tps -8%', true)`, lin, i); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.AddRegressPoints(t.Context(), []store.AddRegressPointParams{{
			Series: store.RegressSeries{Suite: "smoke", Config: "resident", Metric: "decode_tps", DeviceModel: "Pixel 8", Lineage: lin},
			Point:  store.RegressPoint{Seq: 1, Value: 10},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	// count returns how many items (series for /v1/series) a list holds.
	count := func(t *testing.T, path, lineage string) (int, int, string) {
		t.Helper()
		q := url.Values{}
		if strings.HasPrefix(path, "/v1/series") {
			q.Set("suite", "smoke")
			q.Set("metric", "decode_tps")
		}
		if lineage != "-" {
			q.Set("lineage", lineage)
		}
		resp := e.api.Get(path + "?" + q.Encode())
		var page struct {
			Items  []json.RawMessage `json:"items"`
			Series []json.RawMessage `json:"series"`
		}
		json.Unmarshal(resp.Body.Bytes(), &page)
		return resp.Code, len(page.Items) + len(page.Series), resp.Body.String()
	}
	// Both builds are main's (buildstest registers them there); the runs,
	// alert groups and series are one per lineage.
	for _, tc := range []struct {
		path          string
		main, release int
	}{{"/v1/runs", 1, 1}, {"/v1/alerts", 1, 1}, {"/v1/series", 1, 1}, {"/v1/builds", 2, 0}} {
		t.Run(tc.path, func(t *testing.T) {
			every := tc.main + tc.release
			for _, q := range []struct {
				lineage string
				code, n int
			}{{"-", 200, every}, {"*", 200, every}, {"main", 200, tc.main}, {"release-1", 200, tc.release}, {"release-9", 200, 0}, {"release/3", 422, 0}, {"**", 422, 0}} {
				code, n, body := count(t, tc.path, q.lineage)
				if code != q.code || n != q.n {
					t.Errorf("%s?lineage=%s: %d with %d items, want %d with %d: %s", tc.path, q.lineage, code, n, q.code, q.n, body)
				}
				if code == 422 && !strings.Contains(body, `"location":"query.lineage"`) {
					t.Errorf("%s?lineage=%s: 422 not located at query.lineage: %s", tc.path, q.lineage, body)
				}
			}
		})
	}
}

// TestMalformedJSONSaysWhere: a body that is not JSON is a 400 whose
// detail says it is malformed and where (line, column, byte), not
// "validation failed"; a body of the wrong type names the field.
func TestMalformedJSONSaysWhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name, body string
		code       int
		detail     string
	}{
		{"missing key", `{"suite": "smoke", }`, 400, "malformed JSON body: line 1, column 20 (byte 20): invalid character '}' looking for beginning of object key string"},
		{"second line", "{\"suite\": \"smoke\",\n \"build\" \"b1\"}", 400, "malformed JSON body: line 2, column 10 (byte 29): invalid character '\"' after object key"},
		{"truncated", `{"suite": "smo`, 400, "malformed JSON body: line 1, column 14 (byte 14): unexpected end of JSON input"},
		{"not JSON", `suite=smoke`, 400, "malformed JSON body: line 1, column 1 (byte 1): invalid character 's' looking for beginning of value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.do(http.MethodPost, "/v1/runs", strings.NewReader(tc.body), "Content-Type", "application/json", "Authorization", "Bearer "+e.token)
			defer resp.Body.Close()
			var p struct {
				Detail string `json:"detail"`
			}
			json.NewDecoder(resp.Body).Decode(&p)
			if resp.StatusCode != tc.code || p.Detail != tc.detail {
				t.Errorf("POST %q: %d %q, want %d %q", tc.body, resp.StatusCode, p.Detail, tc.code, tc.detail)
			}
		})
	}
}
