package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/calibrate"
)

// calibrate runs the built-in calibrate suite (jobs.SuiteCalibrate): it
// measures this device with runtime/calibrate (O_DIRECT reads of a test
// file in the cache dir over the read grid, memory copy, decode of the
// job's model as the compute reference) and uploads the profile to the
// coordinator as the device's measured profile (PUT
// /v1/devices/{id}/profile), from which `lesfarm agent --profile twin:ID`
// emulates the device. Every config of the job reports the measurement:
// the reference decode as decode_tps and the profile's figures in Extra.
// An emulated agent refuses (it would measure its host, not the device it
// claims to be), as does a phone's (it would measure the host; lesfarm
// profile measure --adb measures the phone), and so does one without a
// coordinator URL to upload to.
func (a *Agent) calibrate(ctx context.Context, asg *protocol.Assignment, modelPath string, progress func(string)) ([]protocol.ConfigResult, error) {
	if a.cfg.Profile != "" {
		return nil, fmt.Errorf("calibrate: this agent emulates profile %s; the calibrate suite measures real devices only", a.cfg.Profile)
	}
	if a.phone != nil {
		return nil, fmt.Errorf("calibrate: device %s is phone %s, and the suite would measure the host that drives it; measure the phone with lesfarm profile measure --adb %s --upload --device %s",
			a.cfg.Name, a.phone.cfg.Serial, a.phone.cfg.Serial, a.cfg.Name)
	}
	if a.cfg.ServerURL == "" {
		return nil, errors.New("calibrate: the agent has no coordinator URL to upload the measured profile to (agent --server)")
	}
	cfg := calibrate.Config{}
	if a.cfg.Calibration != nil {
		cfg = *a.cfg.Calibration
	}
	cfg.Name = a.cfg.Name
	cfg.Dir = a.cfg.CacheDir // on the storage experts are read from
	cfg.Model = modelPath
	cfg.Progress = progress
	res, err := calibrate.Measure(ctx, cfg)
	if err != nil {
		return nil, err
	}
	yaml := res.YAML()
	if err := a.uploadProfile(ctx, yaml); err != nil {
		return nil, err
	}
	p := res.Profile
	direct := 0.0
	if res.Direct {
		direct = 1
	}
	extra := map[string]float64{
		"flash_bandwidth_mbps":   p.Bandwidth / 1e6,
		"flash_latency_us":       float64(p.Latency.Nanoseconds()) / 1e3,
		"flash_max_in_flight":    float64(p.MaxInFlight),
		"flash_direct_io":        direct,
		"flash_cells":            float64(len(res.Cells)),
		"read_ahead_kib":         float64(p.ReadAhead >> 10),
		"memcopy_gbps":           res.CopyGBps,
		"compute_weight_gbps":    p.Compute.WeightBandwidth / 1e9,
		"compute_gflops":         p.Compute.Throughput / 1e9,
		"reference_weight_gbtok": res.WeightGBTok,
	}
	out := make([]protocol.ConfigResult, 0, len(asg.Configs))
	for _, c := range asg.Configs {
		x := make(map[string]float64, len(extra))
		for k, v := range extra {
			x[k] = v
		}
		out = append(out, protocol.ConfigResult{
			ConfigIndex: c.Index, ConfigKey: c.Key,
			DecodeTPS:   protocol.Stat{N: 1, Mean: res.DecodeTPS, Median: res.DecodeTPS, Min: res.DecodeTPS, Max: res.DecodeTPS},
			Repetitions: 1, Valid: true, Extra: x,
		})
	}
	return out, nil
}

// isCalibration reports whether spec is the calibrate suite.
func isCalibration(spec *jobs.Spec) bool { return spec.SuiteName() == jobs.SuiteCalibrate }

// uploadProfile PUTs the measured profile YAML as this device's profile.
func (a *Agent) uploadProfile(ctx context.Context, yaml []byte) error {
	body, err := json.Marshal(map[string]string{"yaml": string(yaml)})
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	u := strings.TrimRight(a.cfg.ServerURL, "/") + "/v1/devices/" + url.PathEscape(a.cfg.Name) + "/profile"
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("calibrate: upload: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if a.cfg.ArtifactToken != "" {
		req.Header.Set("Authorization", "Bearer "+a.cfg.ArtifactToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("calibrate: uploading the profile to %s: %w", a.cfg.ServerURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var prob struct {
		Detail string `json:"detail"`
	}
	detail := strings.TrimSpace(string(msg))
	if json.Unmarshal(msg, &prob) == nil && prob.Detail != "" {
		detail = prob.Detail
	}
	return fmt.Errorf("calibrate: the coordinator refused the profile upload: %s: %s", resp.Status, clipText(strings.Join(strings.Fields(detail), " ")))
}
