package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/measure"
)

// LadderReferenceFormat names the file format of a LadderReference.
const LadderReferenceFormat = "lesfarm-ladder-reference/1"

// Where a ladder's expected tokens came from (LadderReport.ReferenceSource).
const (
	// ReferenceRecorded: tokens recorded once on a machine that held the
	// whole model (LadderConfig.Reference).
	ReferenceRecorded = "recorded"
	// ReferenceResident: an all-resident load of the whole model, made by
	// this ladder (LadderConfig.ResidentReference).
	ReferenceResident = "all-resident"
	// ReferenceStreamed: the on-demand mode under the ladder's own expert
	// budget, so the reference never needs more memory than a rung.
	ReferenceStreamed = "streamed (on-demand)"
)

// LadderReference is a ladder's exactness reference: the greedy tokens a
// model generates from a prompt, recorded once with every expert resident
// on a machine that holds the model, and carried to devices that cannot
// (issue 31, item 4). Every rung of a ladder must generate Tokens.
type LadderReference struct {
	Format string `json:"format"`
	// ModelSHA256 is the sha256 of the model file the tokens came from; a
	// ladder refuses a reference of another file.
	ModelSHA256 string `json:"model_sha256"`
	Prompt      []int  `json:"prompt"`
	Tokens      []int  `json:"tokens"`
	// Source is how the tokens were made (ReferenceResident when recorded
	// by `bench --ladder --record-reference`).
	Source string `json:"source"`
}

// ReadLadderReference reads a LadderReference file and checks its shape.
func ReadLadderReference(path string) (*LadderReference, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: reference: %w", err)
	}
	var r LadderReference
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("bench: reference %s: %w", path, err)
	}
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("bench: reference %s: %w", path, err)
	}
	return &r, nil
}

func (r *LadderReference) validate() error {
	switch {
	case r.Format != LadderReferenceFormat:
		return fmt.Errorf("format %q, want %q", r.Format, LadderReferenceFormat)
	case len(r.ModelSHA256) != 64:
		return errors.New("model_sha256 is not a sha256")
	case len(r.Prompt) == 0 || len(r.Tokens) < 2:
		return fmt.Errorf("%d prompt and %d generated tokens; a ladder needs at least 1 and 2", len(r.Prompt), len(r.Tokens))
	case slices.ContainsFunc(r.Prompt, func(t int) bool { return t < 0 }) || slices.ContainsFunc(r.Tokens, func(t int) bool { return t < 0 }):
		return errors.New("negative token id")
	}
	return nil
}

// WriteFile writes the reference to path.
func (r *LadderReference) WriteFile(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// fileSHA256 returns the hex sha256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ladderReference returns the tokens every rung must generate and the
// prompt, and fills rep's model sizes and ReferenceSource. It never loads
// every expert unless asked to (ResidentReference): a recorded reference
// is checked against the model file, and without one the on-demand mode
// generates it under the ladder's own budget, which the device holds.
func ladderReference(ctx context.Context, cfg LadderConfig, rep *LadderReport) (ref, prompt []int, err error) {
	if cfg.ResidentReference {
		if ref, prompt, err = residentReference(ctx, cfg, rep); err != nil {
			return nil, nil, err
		}
		rep.ReferenceSource = ReferenceResident
		sum, err := fileSHA256(cfg.Model)
		if err != nil {
			return nil, nil, fmt.Errorf("bench: %w", err)
		}
		rep.Reference = &LadderReference{Format: LadderReferenceFormat, ModelSHA256: sum, Prompt: prompt, Tokens: ref, Source: ReferenceResident}
		return ref, prompt, nil
	}
	if r := cfg.Reference; r != nil {
		if err := r.validate(); err != nil {
			return nil, nil, fmt.Errorf("bench: reference: %w", err)
		}
		sum, err := fileSHA256(cfg.Model)
		if err != nil {
			return nil, nil, fmt.Errorf("bench: %w", err)
		}
		if sum != r.ModelSHA256 {
			return nil, nil, fmt.Errorf("bench: the reference was recorded on model sha256 %s, %s is %s", r.ModelSHA256[:12], cfg.Model, sum[:12])
		}
		if len(r.Tokens) != cfg.GenTokens {
			return nil, nil, fmt.Errorf("bench: the reference has %d generated tokens, the ladder generates %d (--tokens)", len(r.Tokens), cfg.GenTokens)
		}
		cfg.Prompt, cfg.PromptTokens = r.Prompt, len(r.Prompt)
	}
	s, err := openMode(cfg, expert.OnDemand, cfg.Budget, les.CurrentRSS(), false, nil)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	rep.ExpertBytes, rep.ResidentBytes = s.ExpertBytes, s.Model.ResidentBytes
	if prompt, err = checkLadderModel(s, cfg); err != nil {
		return nil, nil, err
	}
	if r := cfg.Reference; r != nil {
		rep.ReferenceSource, rep.Reference = ReferenceRecorded, r
		return r.Tokens, prompt, nil
	}
	res, err := s.Repetition(ctx, les.RepParams{Prompts: [][]int{prompt}, MaxTokens: cfg.GenTokens})
	if err != nil {
		return nil, nil, err
	}
	rep.ReferenceSource = ReferenceStreamed
	return res.Tokens[0], prompt, nil
}

// checkLadderModel refuses a model the ladder cannot run (no routed
// experts, a context too short, a prompt outside the vocabulary) and
// returns the prompt.
func checkLadderModel(s *les.Session, cfg LadderConfig) ([]int, error) {
	m := s.Model
	if !m.IsMoE() {
		return nil, fmt.Errorf("bench: %s is not a Mixture-of-Experts model; the ladder streams experts", cfg.Model)
	}
	if cfg.PromptTokens+cfg.GenTokens > m.Context {
		return nil, fmt.Errorf("bench: %d prompt + %d generated tokens exceed the context length %d", cfg.PromptTokens, cfg.GenTokens, m.Context)
	}
	prompt := cfg.Prompt
	if len(prompt) == 0 {
		prompt = ladderPrompt(cfg.PromptTokens, m.Vocab)
	}
	for _, id := range prompt {
		if id < 0 || id >= m.Vocab {
			return nil, fmt.Errorf("bench: prompt token %d is outside the vocabulary of %d", id, m.Vocab)
		}
	}
	return prompt, nil
}

// ladderPrompt is a deterministic pseudo-random prompt over the vocabulary.
func ladderPrompt(n, vocab int) []int {
	toks := make([]int, n)
	x := uint64(0x2545f4914f6cdd1d)
	for i := range toks {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		toks[i] = int(x % uint64(vocab))
	}
	return toks
}

// residentReference opens the model with every expert in RAM and returns
// its greedy tokens and the prompt: the reference recorded on a machine
// that holds the model (LadderConfig.ResidentReference).
func residentReference(ctx context.Context, cfg LadderConfig, rep *LadderReport) ([]int, []int, error) {
	s, err := measure.OpenSession(measure.Config{Model: cfg.Model, Resident: true, Threads: cfg.Threads})
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	rep.ExpertBytes, rep.ResidentBytes = s.ExpertBytes, s.Model.ResidentBytes
	prompt, err := checkLadderModel(s, cfg)
	if err != nil {
		return nil, nil, err
	}
	r, err := s.Repetition(ctx, les.RepParams{Prompts: [][]int{prompt}, MaxTokens: cfg.GenTokens})
	if err != nil {
		return nil, nil, err
	}
	rep.ResidentRSS = s.PeakRSS()
	return r.Tokens[0], prompt, nil
}
