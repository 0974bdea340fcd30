package protocol

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Version is the protocol version this package speaks, the "v" of every
// message and the "v1" of every subject.
const Version = 1

// Prefix starts every subject.
const Prefix = "lesfarm.v1"

// JetStream stream names and the subjects they hold.
const (
	StreamTelemetry         = "TELEMETRY"
	StreamResults           = "RESULTS"
	TelemetrySubjectPattern = Prefix + ".telemetry.>"
	ResultSubjectPattern    = Prefix + ".result.>"
)

// Device subject kinds.
const (
	KindHello     = "hello"
	KindHeartbeat = "heartbeat"
	KindAssign    = "assign"
	KindCancel    = "cancel"
)

// Wildcard subjects the coordinator subscribes to.
const (
	HelloWildcard     = Prefix + ".device.*." + KindHello
	HeartbeatWildcard = Prefix + ".device.*." + KindHeartbeat
)

var deviceIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidDeviceID reports whether id can be a device id: 1 to 64 letters,
// digits, '_' or '-' (a single NATS subject token, no wildcards).
func ValidDeviceID(id string) bool { return deviceIDRE.MatchString(id) }

// DeviceSubject returns lesfarm.v1.device.<id>.<kind>.
func DeviceSubject(id, kind string) string { return Prefix + ".device." + id + "." + kind }

// HelloSubject returns the hello subject of a device.
func HelloSubject(id string) string { return DeviceSubject(id, KindHello) }

// HeartbeatSubject returns the heartbeat subject of a device.
func HeartbeatSubject(id string) string { return DeviceSubject(id, KindHeartbeat) }

// AssignSubject returns the subject a device's agent receives assignments on.
func AssignSubject(id string) string { return DeviceSubject(id, KindAssign) }

// CancelSubject returns the subject a device's agent receives cancels on.
func CancelSubject(id string) string { return DeviceSubject(id, KindCancel) }

// TelemetrySubject returns lesfarm.v1.telemetry.<run>.
func TelemetrySubject(runID int64) string {
	return Prefix + ".telemetry." + strconv.FormatInt(runID, 10)
}

// ResultSubject returns lesfarm.v1.result.<run>.
func ResultSubject(runID int64) string {
	return Prefix + ".result." + strconv.FormatInt(runID, 10)
}

// ParseDeviceSubject splits lesfarm.v1.device.<id>.<kind>.
func ParseDeviceSubject(subject string) (id, kind string, err error) {
	rest, ok := strings.CutPrefix(subject, Prefix+".device.")
	if !ok {
		return "", "", fmt.Errorf("protocol: %q is not a device subject", clip(subject))
	}
	id, kind, ok = strings.Cut(rest, ".")
	if !ok || !ValidDeviceID(id) {
		return "", "", fmt.Errorf("protocol: bad device id in subject %q", clip(subject))
	}
	switch kind {
	case KindHello, KindHeartbeat, KindAssign, KindCancel:
		return id, kind, nil
	}
	return "", "", fmt.Errorf("protocol: unknown device subject kind %q", clip(kind))
}

// DeviceTelemetrySubject returns lesfarm.v1.telemetry.<device>.<run>, the
// telemetry subject that names its publisher: a coordinator enforcing device
// permissions lets a device publish only under its own id, and ingest
// rejects a batch whose device_id is not the subject's.
func DeviceTelemetrySubject(deviceID string, runID int64) string {
	return Prefix + ".telemetry." + deviceID + "." + strconv.FormatInt(runID, 10)
}

// DeviceInboxPrefix returns _INBOX.<device>, the inbox prefix an agent
// connects with (nats.CustomInboxPrefix), so the replies it waits for
// (request replies, JetStream publish acks) arrive under its own id and a
// coordinator enforcing device permissions can let it subscribe to its own
// inboxes only.
func DeviceInboxPrefix(deviceID string) string { return "_INBOX." + deviceID }

// DeviceResultSubject returns lesfarm.v1.result.<device>.<run> (see
// DeviceTelemetrySubject).
func DeviceResultSubject(deviceID string, runID int64) string {
	return Prefix + ".result." + deviceID + "." + strconv.FormatInt(runID, 10)
}

// ParseRunSubject returns the run id of lesfarm.v1.telemetry.<run>,
// lesfarm.v1.result.<run> or their device-scoped forms
// lesfarm.v1.telemetry.<device>.<run> and lesfarm.v1.result.<device>.<run>.
func ParseRunSubject(subject string) (int64, error) {
	_, id, err := ParseDataSubject(subject)
	return id, err
}

// ParseDataSubject splits a telemetry or result subject into the device id
// it names ("" for the run-only form lesfarm.v1.telemetry.<run>) and the
// run id.
func ParseDataSubject(subject string) (deviceID string, runID int64, err error) {
	rest, ok := strings.CutPrefix(subject, Prefix+".telemetry.")
	if !ok {
		rest, ok = strings.CutPrefix(subject, Prefix+".result.")
	}
	if !ok {
		return "", 0, fmt.Errorf("protocol: %q is not a run subject", clip(subject))
	}
	if dev, run, scoped := strings.Cut(rest, "."); scoped {
		if !ValidDeviceID(dev) {
			return "", 0, fmt.Errorf("protocol: bad device id in subject %q", clip(subject))
		}
		deviceID, rest = dev, run
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || id <= 0 {
		return "", 0, fmt.Errorf("protocol: bad run id in subject %q", clip(subject))
	}
	return deviceID, id, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
