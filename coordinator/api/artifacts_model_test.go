package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestArtifactUploadRecordsModelFacts: uploading a GGUF (a synthetic
// qwen3moe written by runtime/model) records its header facts in Postgres
// and returns them; other content is analysed and has none.
func TestArtifactUploadRecordsModelFacts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var buf bytes.Buffer
	if err := model.WriteSynthetic(&buf, model.SynthConfig{Layers: 2, Experts: 4, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 32, Heads: 2, Vocab: 300, Type: tensor.Q8_0, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	gf, err := gguf.Parse(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, ti := range gf.Tensors() {
		total += ti.Size
	}

	upload := func(body []byte) (int, Artifact) {
		t.Helper()
		resp := e.do("POST", "/v1/artifacts?name=m.gguf", bytes.NewReader(body), "Authorization", "Bearer "+e.token)
		b, _ := io.ReadAll(resp.Body)
		var a Artifact
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}
		return resp.StatusCode, a
	}
	code, a := upload(data)
	if code != http.StatusCreated || a.Model == nil || a.ModelCheckedAt == nil {
		t.Fatalf("upload: %d %+v", code, a)
	}
	m := a.Model
	if m.Architecture != "qwen3moe" || !m.MoE || m.ExpertCount != 4 || m.ExpertsUsed != 2 || m.Packed ||
		!slices.Equal(m.TensorTypes, []string{"F32", "Q8_0"}) || m.TotalBytes != total || m.ExpertBytes == 0 ||
		m.ResidentBytes != total-m.ExpertBytes || m.Tensors != len(gf.Tensors()) {
		t.Fatalf("facts %+v (tensor bytes %d)", m, total)
	}
	// Stored: the info endpoint and the store return the same facts.
	resp := e.do("GET", "/v1/artifacts/"+a.SHA256+"/info", nil)
	var info Artifact
	json.NewDecoder(resp.Body).Decode(&info)
	if info.Model == nil || info.Model.ExpertCount != m.ExpertCount || info.Model.ResidentBytes != m.ResidentBytes {
		t.Fatalf("info %+v", info)
	}
	got, analysed, err := e.st.ArtifactModelFacts(context.Background(), a.SHA256)
	if err != nil || !analysed || got == nil || got.ExpertBytes != m.ExpertBytes || got.Architecture != "qwen3moe" {
		t.Fatalf("stored facts %+v analysed %v err %v", got, analysed, err)
	}
	// A re-upload of an artifact stored before analysis existed fills it in.
	if _, err := e.st.Pool().Exec(context.Background(), `UPDATE artifacts SET model_facts = NULL, model_checked_at = NULL WHERE sha256 = $1`, a.SHA256); err != nil {
		t.Fatal(err)
	}
	if f, analysed, err := e.st.ArtifactModelFacts(context.Background(), a.SHA256); f != nil || analysed || err != nil {
		t.Fatalf("unanalysed artifact: %+v %v %v", f, analysed, err)
	}
	if code, a2 := upload(data); code != http.StatusOK || a2.Model == nil || a2.Model.ExpertBytes != m.ExpertBytes {
		t.Fatalf("re-upload: %d %+v", code, a2)
	}

	code, other := upload([]byte("just some bytes, not a model"))
	if code != http.StatusCreated || other.Model != nil || other.ModelCheckedAt == nil || other.ModelError != "" {
		t.Fatalf("non-GGUF upload: %d %+v", code, other)
	}
	none, analysed, err := e.st.ArtifactModelFacts(context.Background(), other.SHA256)
	if err != nil || none != nil || !analysed {
		t.Fatalf("non-GGUF facts %+v analysed %v err %v", none, analysed, err)
	}
	// A GGUF with a broken header is stored, with the reason and no facts.
	code, bad := upload(data[:200])
	if code != http.StatusCreated || bad.Model != nil || bad.ModelError == "" {
		t.Fatalf("broken GGUF upload: %d %+v", code, bad)
	}
}
