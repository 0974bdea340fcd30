package artifact

import (
	"bytes"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestReadModelFactsContextLength: <arch>.context_length lands in the
// facts (the trigger refuses a spec that cannot fit it); absent, it is 0.
func TestReadModelFactsContextLength(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kvs  []any
		want int
	}{
		{[]any{"qwen3moe.context_length", uint32(256)}, 256},
		{nil, 0},
	} {
		data := fakeModel(t, "qwen3moe", tensor.F32, c.kvs...)
		f, err := ReadModelFacts(bytes.NewReader(data), int64(len(data)))
		if err != nil || f == nil || f.ContextLength != c.want {
			t.Fatalf("kvs %v: facts %+v, %v; want context_length %d", c.kvs, f, err, c.want)
		}
	}
}
