package expert

import (
	"bytes"
	"compress/gzip"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func testTraceFile() *TraceFile {
	tr := randomTrace(3, 20, 4, 16, 4)
	// Add prefetch calls as the lookahead modes record them.
	var calls []TraceCall
	for _, c := range tr.Calls {
		calls = append(calls, TraceCall{Layer: c.Layer, Experts: []int{c.Experts[0], 15, 3}, Prefetch: true}, c)
	}
	tr.Calls = calls
	m := TraceModel{Name: "test", Arch: "qwen3moe", ExpertsUsed: 4}
	for range 4 {
		m.Layers = append(m.Layers, TraceLayer{Experts: 16, ExpertBytes: 3 << 12})
	}
	return &TraceFile{Model: m, Trace: *tr}
}

func encodeTrace(t testing.TB, tf *TraceFile) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := tf.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func payload(t testing.TB, gz []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestTraceFileRoundTrip(t *testing.T) {
	t.Parallel()
	tf := testTraceFile()
	path := filepath.Join(t.TempDir(), "t.trace.gz")
	if err := tf.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, tf) {
		t.Fatal("the trace read back differs from the one written")
	}
	if err := got.Model.Match(tf.Model); err != nil {
		t.Fatal(err)
	}
}

func TestTraceFileBadInput(t *testing.T) {
	t.Parallel()
	good := encodeTrace(t, testTraceFile())
	p := payload(t, good)
	rezip := func(b []byte) []byte {
		var out bytes.Buffer
		zw := gzip.NewWriter(&out)
		zw.Write(b)
		zw.Close()
		return out.Bytes()
	}
	flipped := append([]byte(nil), p...)
	flipped[len(flipped)/2] ^= 0x40
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not gzip"},
		{"not gzip", []byte("LESTRACE plain text"), "not gzip"},
		{"truncated gzip", good[:len(good)/2], "truncated"},
		{"truncated payload", rezip(p[:len(p)-9]), "checksum"},
		{"corrupt byte", rezip(flipped), "checksum"},
		{"wrong magic", rezip(append([]byte("NOTTRACE"), p[8:]...)), "header"},
	} {
		_, err := ReadTrace(bytes.NewReader(tc.data))
		if err == nil || !errors.Is(err, ErrBadTrace) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want a one-line ErrBadTrace mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestTraceModelMatch(t *testing.T) {
	t.Parallel()
	base := testTraceFile().Model
	for _, tc := range []struct {
		name string
		edit func(*TraceModel)
		want string
	}{
		{"architecture", func(m *TraceModel) { m.Arch = "mixtral" }, "architectures"},
		{"layers", func(m *TraceModel) { m.Layers = m.Layers[:3] }, "layer counts"},
		{"experts", func(m *TraceModel) { m.Layers[2].Experts = 8 }, "layer 2's expert counts"},
		{"sizes", func(m *TraceModel) { m.Layers[1].ExpertBytes++ }, "layer 1's expert sizes"},
		{"top-k", func(m *TraceModel) { m.ExpertsUsed = 2 }, "experts per token"},
	} {
		other := base
		other.Layers = append([]TraceLayer(nil), base.Layers...)
		tc.edit(&other)
		err := base.Match(other)
		if err == nil || !strings.Contains(err.Error(), "another model") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	// The name alone does not matter: a renamed copy routes the same.
	other := base
	other.Name = "renamed"
	if err := base.Match(other); err != nil {
		t.Fatal(err)
	}
}

func FuzzDecodeTrace(f *testing.F) {
	tf := testTraceFile()
	f.Add(payload(f, encodeTrace(f, tf)))
	small := &TraceFile{Model: TraceModel{Arch: "a", Layers: []TraceLayer{{Experts: 2, ExpertBytes: 1}}}, Trace: RoutingTrace{Calls: []TraceCall{{Layer: 0, Experts: []int{1, 0}}}}}
	f.Add(payload(f, encodeTrace(f, small)))
	f.Add([]byte(traceMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeTrace(data)
		if err != nil {
			if !errors.Is(err, ErrBadTrace) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q is not a one-line ErrBadTrace", err)
			}
			return
		}
		// Whatever decodes is in range and re-encodes to the same trace.
		for _, c := range got.Trace.Calls {
			for _, e := range c.Experts {
				if c.Layer >= len(got.Model.Layers) || e >= got.Model.Layers[c.Layer].Experts {
					t.Fatalf("decoded out-of-range call %+v", c)
				}
			}
		}
		again, err := DecodeTrace(payload(t, encodeTrace(t, got)))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("re-encoding a decoded trace: %v", err)
		}
	})
}

func FuzzReadTrace(f *testing.F) {
	good := encodeTrace(f, testTraceFile())
	f.Add(good)
	f.Add(good[:len(good)/3])
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := ReadTrace(bytes.NewReader(data)); err != nil && (!errors.Is(err, ErrBadTrace) || strings.Contains(err.Error(), "\n")) {
			t.Fatalf("error %q is not a one-line ErrBadTrace", err)
		}
	})
}
