package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/schollz/progressbar/v3"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
)

// runModelHelp is run --help's paragraph on --model.
const runModelHelp = `

--model FILE runs the suite on FILE instead of the suite's own model: run
uploads it to the coordinator (cheap when it is already stored) and puts it
in the override. The built-in smoke, les-ladder and calibrate suites name
the trained fixture tiny-moe-kjv-f16.gguf (upload it with lesfarm artifact
add when you have it); any GGUF MoE works instead, e.g. one lesfarm makes:
  lesfarm synth --layers 4 --experts 16 --experts-used 4 --hidden 256 --expert-ffn 256 \
      --heads 4 --kv-heads 2 --vocab 4096 --type F16 -o model.gguf
  lesfarm run --suite smoke --model model.gguf --build B --fanout --wait
A synthetic model's weights are random: its timings and expert traffic
are real, its text is not. A series is keyed by suite, config, metric,
device and lineage, not by model: on a farm that also runs the suite on
its own model, give such runs a lineage of their own (--lineage synth) so
the two models' results never share a series.`

// modelOverride uploads the GGUF file at path to the coordinator and
// returns override (a JSON object, or empty) with its model set to that
// file. A model given both ways is a usage error.
func modelOverride(ctx context.Context, env *Env, c *client.Client, path string, override json.RawMessage) (json.RawMessage, error) {
	ov := map[string]json.RawMessage{}
	if len(override) > 0 {
		if err := json.Unmarshal(override, &ov); err != nil {
			return nil, usagef("run: --override is not a JSON object: %v", err)
		}
		if _, ok := ov["model"]; ok {
			return nil, usagef("run: give the model with --model or in --override, not both")
		}
	}
	sum, size, err := fileSHA256(path)
	if err != nil {
		return nil, usagef("run: --model: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("run: --model: %v", err)
	}
	defer f.Close()
	name := filepath.Base(path)
	bar := newBytesBar(env, size, "uploading "+name, false, progressbar.OptionShowTotalBytes(true))
	r := progressbar.NewReader(f, bar)
	if _, _, err := c.UploadArtifact(ctx, &r, size, name, sum); err != nil {
		return nil, fmt.Errorf("run: uploading --model %s: %w", path, err)
	}
	_ = bar.Finish()
	ov["model"], err = json.Marshal(map[string]any{"name": name, "sha256": sum, "size": size})
	if err != nil {
		return nil, err
	}
	return json.Marshal(ov)
}
