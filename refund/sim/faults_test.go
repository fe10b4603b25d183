package sim

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestFaultsJSONRoundTrip checks that every knob, Adyen's included, goes
// through POST /_sim/faults' JSON and back unchanged.
func TestFaultsJSONRoundTrip(t *testing.T) {
	f := Faults{Latency: time.Millisecond, RateLimitShare: 0.1, PayPalPendingFor: time.Minute,
		AdyenRefundFailedShare: 0.1, AdyenRefundFailedLaterShare: 0.2, AdyenReversedShare: 0.3,
		AdyenNotifyDelay: 20 * time.Millisecond, AdyenNotifyJitter: 5 * time.Millisecond, AdyenNotifyDuplicateShare: 0.4,
		AdyenNotifyReorder: true, AdyenNotifyFailShare: 0.5, AdyenConflictStatus: 409, AdyenOverRefund422: true}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"adyen_notify_delay":"20ms"`) || !strings.Contains(string(b), `"adyen_conflict_status":409`) {
		t.Errorf("json %s", b)
	}
	var back Faults
	if err := json.Unmarshal(b, &back); err != nil || back != f {
		t.Errorf("back %+v (%v), want %+v", back, err, f)
	}
	if err := f.Validate(); err != nil {
		t.Error(err)
	}
	for _, bad := range []Faults{{AdyenNotifyFailShare: 1.5}, {AdyenNotifyDelay: -1}, {AdyenConflictStatus: 400}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

// TestFaultsJSONFields: faultsJSON lists Faults' fields, in its order.
func TestFaultsJSONFields(t *testing.T) {
	f, w := reflect.TypeFor[Faults](), reflect.TypeFor[faultsJSON]()
	if f.NumField() != w.NumField() {
		t.Fatalf("Faults has %d fields, faultsJSON %d", f.NumField(), w.NumField())
	}
	for i := range f.NumField() {
		if f.Field(i).Name != w.Field(i).Name {
			t.Errorf("field %d: %s in Faults, %s in faultsJSON", i, f.Field(i).Name, w.Field(i).Name)
		}
	}
}
