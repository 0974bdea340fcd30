package expert

import (
	"reflect"
	"testing"
)

// TestStoreAPIStaysSmall: Store's exported methods are the model's
// interfaces, its lifecycle and one accessor per part (Info, Meter,
// Clock); a new figure or knob belongs on Meter, DeviceClock or Info, not
// on Store (issue 33: it had 24 exported methods).
func TestStoreAPIStaysSmall(t *testing.T) {
	const most = 15
	typ := reflect.TypeFor[*Store]()
	var names []string
	for m := range typ.Methods() {
		names = append(names, m.Name)
	}
	t.Logf("%d exported methods: %v", len(names), names)
	if len(names) > most {
		t.Fatalf("Store has %d exported methods, at most %d: %v", len(names), most, names)
	}
	for _, want := range []string{"Use", "Prefetch", "PredictK", "Meter", "Clock", "Info", "Close"} {
		if _, ok := typ.MethodByName(want); !ok {
			t.Errorf("Store lacks %s", want)
		}
	}
}
