package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestDevicesShowBuilds: the devices page says which code each agent
// runs (its build, the runtime build when it differs, the embedded build
// linked to its page, the platform of the executables it runs), says so
// for an agent that runs only its embedded build, and shows a dash for
// one that reported none; it says since when each agent runs its build and,
// when the build changed, what it ran before; at 390 px the page stays
// within the screen.
func TestDevicesShowBuilds(t *testing.T) {
	f := newFarm(t)
	ctx := context.Background()
	// pixel-8 ran v0.9.0 before its current build.
	if _, err := f.st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "pixel-8", TTL: time.Minute, Coordinator: "test",
		Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "Pixel 8", AgentBuild: "v0.9.0", RuntimeBuild: "v0.9.0", EmbeddedBuild: "app-0.9.0"}}); err != nil {
		t.Fatal(err)
	}
	for _, fp := range []protocol.Fingerprint{
		{Platform: "linux", DeviceModel: "phone-mid", Emulated: true, AgentBuild: "v0.9.0+9813d69a0b1c", RuntimeBuild: "v0.9.0+9813d69a0b1c",
			ExecPlatform: "linux/amd64", EmbeddedBuild: "demo-20261205T101500-embedded", EmbeddedSHA256: fakeSHA("embedded")},
		{Platform: "android", DeviceModel: "Pixel 8", AgentBuild: "v0.9.1", RuntimeBuild: "v0.9.0", EmbeddedBuild: "app-0.9.1"},
		{Platform: "ios", DeviceModel: "iPhone 15"},
	} {
		if _, err := f.st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: strings.ToLower(strings.ReplaceAll(fp.DeviceModel, " ", "-")), TTL: time.Minute,
			Coordinator: "test", Fingerprint: fp}); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t)
	b.open(t, f.url, "/devices")
	for id, want := range map[string]string{
		"phone-mid": "v0.9.0+9813d69a0b1c embeds demo-20261205T101500-embedded runs linux/amd64 builds since just now",
		"pixel-8":   "v0.9.1 · runtime v0.9.0 embeds app-0.9.1 runs its embedded build only changed just now, was v0.9.0 · embeds app-0.9.0",
		"iphone-15": "—",
	} {
		got := strings.Join(strings.Fields(eval[string](t, b, `document.querySelector('tr[data-device-id="`+id+`"] td.build').innerText`)), " ")
		if got != want {
			t.Errorf("%s build cell %q, want %q", id, got, want)
		}
	}
	if got := eval[string](t, b, `document.querySelector('tr[data-device-id="phone-mid"] td.build a').getAttribute('href')`); got != "/builds/demo-20261205T101500-embedded" {
		t.Errorf("embedded build links to %q", got)
	}
	b.do(t, "390 px viewport", chromedp.EmulateViewport(390, 844))
	b.open(t, f.url, "/devices")
	if fit := eval[pageFit](t, b, overflowJS); fit.PageWidth > fit.View || len(fit.Wide) > 0 {
		t.Errorf("390 px /devices: %.0f px wide; sticking out: %q", fit.PageWidth, fit.Wide)
	}
}
