package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// demoModelName is the file name of the demo's packed synthetic model with
// fine-grained-moe routing (the model the built-in les-demo suite names).
const demoModelName = "les-demo-synth-q8_0.packed.gguf"

// demoModelFile is the file name of the demo's model with routing preset
// routing: demoModelName for fine-grained-moe, the preset in the name for
// any other.
func demoModelFile(routing string) string {
	if routing == model.RoutingFineGrained {
		return demoModelName
	}
	return "les-demo-synth-" + routing + "-q8_0.packed.gguf"
}

// demoSynthConfig is the demo's synthetic MoE with routing preset routing:
// small enough to write, pack and run in seconds, with enough experts (32,
// top-4) that a 25% budget streams most of them and lookahead has
// something to predict.
func demoSynthConfig(routing string) model.SynthConfig {
	return model.SynthConfig{Arch: "qwen3moe", Layers: 6, Experts: 32, ExpertsUsed: 4, Hidden: 256, ExpertFFN: 256,
		Heads: 4, KVHeads: 2, Vocab: 2048, Context: 256, Type: tensor.Q8_0, Seed: 7, Routing: routing}
}

// demoSynthModel writes the demo's synthetic model with routing preset
// routing, packed, into dataDir/models once and returns its path. synth
// and pack are deterministic, so the fine-grained-moe model's sha256 is
// the one les-demo.yaml names (want): a file left by an older version
// under that name (the uniform model, before fine-grained-moe became the
// default) is written again rather than run under the new suite.
func demoSynthModel(ctx context.Context, dataDir, routing, want string) (string, error) {
	out := filepath.Join(dataDir, "models", demoModelFile(routing))
	if _, err := os.Stat(out); err == nil {
		if want == "" || routing != model.RoutingFineGrained {
			return out, nil
		}
		if sum, _, err := fileSHA256(out); err == nil && sum == want {
			return out, nil
		}
	}
	if err := writeDemoModel(ctx, out, routing); err != nil {
		return "", fmt.Errorf("demo: write synthetic model: %w", err)
	}
	return out, nil
}

// writeDemoModel writes the synthetic model with routing preset routing
// and packs it into out.
func writeDemoModel(ctx context.Context, out, routing string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	cfg := demoSynthConfig(routing)
	if err := cfg.Defaults(); err != nil {
		return err
	}
	raw := out + ".unpacked.tmp"
	defer os.Remove(raw)
	f, err := os.Create(raw)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = model.WriteSynthetic(w, cfg)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := pack.Pack(ctx, raw, tmp, pack.Options{}); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// fileSHA256 returns a file's sha256 (hex) and size.
func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), size, nil
}

func uploadModel(ctx context.Context, cl *client.Client, path string) (string, int64, error) {
	sum, size, err := fileSHA256(path)
	if err != nil {
		return "", 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	if _, _, err := cl.UploadArtifact(ctx, f, size, filepath.Base(path), sum); err != nil {
		return "", 0, fmt.Errorf("demo: upload model: %w", err)
	}
	return sum, size, nil
}

// putJSON sends body as JSON with PUT and a bearer token.
func putJSON(ctx context.Context, url, token string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("demo: PUT %s: %s: %s", url, resp.Status, msg)
	}
	return nil
}

func getJSON(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
