package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

func TestValidateAssignment(t *testing.T) {
	t.Parallel()
	const mib = int64(1) << 20
	base := func() *protocol.Assignment {
		spec, err := jobs.Builtin("smoke") // 33 MB model: resident and on-demand at 50 %
		if err != nil {
			t.Fatal(err)
		}
		return assignment(spec, "dev-1", 1, 1, "http://127.0.0.1:1/model.gguf")
	}
	noProfile := func(jobs.Config) (*expert.Profile, error) { return nil, nil }
	smallProfile := func(jobs.Config) (*expert.Profile, error) {
		return &expert.Profile{Name: "tiny-phone", RAMBudget: 10 * mib}, nil
	}
	unknownProfile := func(c jobs.Config) (*expert.Profile, error) {
		return nil, errors.New("storage profile no-such-phone unknown")
	}
	facts := func(arch string, total int64) *protocol.ModelFacts {
		return &protocol.ModelFacts{Architecture: arch, MoE: true, TensorTypes: []string{"F16", "F32"}, Tensors: 10,
			TotalBytes: total, ExpertBytes: total * 9 / 10, ResidentBytes: total / 10}
	}
	for _, tc := range []struct {
		name    string
		edit    func(*protocol.Assignment)
		ram     int64
		resolve func(jobs.Config) (*expert.Profile, error)
		code    string
		in      string // part of the reason
		skip    string // part of the resident config's skip reason ("": not skipped)
	}{
		{name: "unknown RAM accepts", resolve: noProfile},
		{name: "enough RAM accepts", ram: 64 * mib, resolve: noProfile},
		{name: "wrong device", edit: func(a *protocol.Assignment) { a.DeviceID = "dev-2" }, resolve: noProfile,
			code: protocol.RefuseWrongDevice, in: `"dev-2" reached "dev-1"`},
		{name: "unknown prompt set", edit: func(a *protocol.Assignment) { a.Spec.Prompts = jobs.Prompts{Set: "no-such-set"} }, resolve: noProfile,
			code: protocol.RefuseUnsupported, in: "no-such-set"},
		{name: "unknown layout", edit: func(a *protocol.Assignment) { a.Spec.Model.Layout = "zipped" }, resolve: noProfile,
			code: protocol.RefuseUnsupported, in: `layout "zipped"`},
		{name: "unknown mode", edit: func(a *protocol.Assignment) { a.Configs[1].Mode = "telepathic" }, resolve: noProfile,
			code: protocol.RefuseUnsupported, in: `mode "telepathic"`},
		{name: "unknown profile", resolve: unknownProfile, code: protocol.RefuseUnsupported, in: "no-such-phone"},
		// A config that holds the whole model is skipped on a device that
		// cannot hold it, while the rest runs (issue 31, item 4).
		{name: "device RAM too small for resident: skipped", ram: 20 * mib, resolve: noProfile,
			skip: "skipped: the device cannot hold the whole model: config resident needs"},
		{name: "nothing but resident: refused", ram: 20 * mib, resolve: noProfile,
			edit: func(a *protocol.Assignment) { a.Configs = a.Configs[:1] },
			code: protocol.RefuseInsufficientRAM, in: "config resident needs"},
		{name: "profile budget below device RAM", ram: 1 << 30, resolve: smallProfile,
			code: protocol.RefuseInsufficientRAM, in: "the device has 10MiB"},
		{name: "facts: unknown architecture", edit: func(a *protocol.Assignment) { a.Model = facts("llama4", 10*mib) }, resolve: noProfile,
			code: protocol.RefuseUnsupported, in: "architecture llama4"},
		{name: "facts: too large for any config", edit: func(a *protocol.Assignment) { a.Model = facts("qwen3moe", 512*mib) }, ram: 256 * mib, resolve: noProfile,
			code: protocol.RefuseInsufficientRAM, in: "config on-demand"},
		{name: "facts: resident skipped, streaming fits", edit: func(a *protocol.Assignment) { a.Model = facts("qwen3moe", 512*mib) }, ram: 400 * mib, resolve: noProfile,
			skip: "has 400.0 MiB (config resident: weights"},
		{name: "facts replace the spec's size", edit: func(a *protocol.Assignment) {
			a.Spec.Model.Size = 1 << 50
			a.Model = facts("qwen3moe", 16*mib)
		}, ram: 256 * mib, resolve: noProfile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asg := base()
			if tc.edit != nil {
				tc.edit(asg)
			}
			code, reason := validateAssignment(asg, deviceLimits{name: "dev-1", ramBytes: tc.ram, resolveProfile: tc.resolve})
			if code != tc.code || !strings.Contains(reason, tc.in) {
				t.Fatalf("validateAssignment = %q, %q; want %q mentioning %q", code, reason, tc.code, tc.in)
			}
			if tc.code == "" && reason != "" {
				t.Fatalf("accepted with a reason: %q", reason)
			}
			if tc.code != "" {
				return
			}
			skip := skippedConfigs(asg, deviceLimits{name: "dev-1", ramBytes: tc.ram, resolveProfile: tc.resolve})
			if got := skip[asg.Configs[0].Index]; asg.Configs[0].Mode != jobs.ModeResident || !strings.Contains(got, tc.skip) || (tc.skip == "") != (got == "") {
				t.Fatalf("resident config skipped %q, want mentioning %q", got, tc.skip)
			}
			if len(skip) > 1 {
				t.Fatalf("streaming configs skipped too: %v", skip)
			}
		})
	}
}
