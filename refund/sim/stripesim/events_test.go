package stripesim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/refundkit/refundkit/refund/sim"
)

var testSecrets = []string{"whsec_test_first", "whsec_test_second", "whsec_test_third"}

// receiver is a webhook endpoint that verifies as a Stripe receiver
// should, with stripe-go's webhook package, and keeps what verified.
type receiver struct {
	secrets []string
	fail    atomic.Int64 // answer 500 to this many verified posts first

	mu      sync.Mutex
	got     []received // verified and accepted, in arrival order
	refused int        // posts no secret verifies
}

type received struct {
	ev     stripe.Event
	raw    map[string]json.RawMessage
	by     []int // the secrets that verify it
	header string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.URL.Path != "/stripe/events" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var by []int
	var ev stripe.Event
	for i, sec := range rc.secrets {
		if webhook.ValidatePayload(body, r.Header.Get("Stripe-Signature"), sec) == nil {
			by = append(by, i)
			ev, err = webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), sec) // the API version too
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(by) == 0 || err != nil {
		rc.refused++
		http.Error(w, "signature", http.StatusBadRequest)
		return
	}
	if rc.fail.Add(-1) >= 0 {
		http.Error(w, "try later", http.StatusInternalServerError)
		return
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(body, &raw)
	rc.got = append(rc.got, received{ev: ev, raw: raw, by: by, header: r.Header.Get("Stripe-Signature")})
}

func (rc *receiver) events() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// startEvents serves a simulator of n charges whose events go to a receiver.
func startEvents(t *testing.T, n int, f Faults, ev EventsConfig) (*Server, *receiver) {
	t.Helper()
	rc := &receiver{secrets: testSecrets}
	hs := httptest.NewServer(rc)
	t.Cleanup(hs.Close)
	ev.URL = hs.URL + "/stripe/events"
	if ev.Secrets == nil {
		ev.Secrets = testSecrets[:1]
	}
	ev.Backoff = time.Millisecond
	s := start(t, Config{Charges: GenerateCharges(n, 1), Faults: f, Events: ev})
	return s, rc
}

// refundAll refunds each charge in full, in order, and returns the ids.
func refundAll(t *testing.T, s *Server, n int) []string {
	t.Helper()
	c := newClients(s, clientOpts{keepAlive: true})
	ids := make([]string, n)
	for i := range n {
		re, err := c.refunds.New(refundParams(sim.Padded("ch_sim", 7, i+1), 0, fmt.Sprint("key-", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = re.ID
	}
	return ids
}

func flush(t *testing.T, s *Server) EventStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s.FlushEvents(ctx)
	if err != nil {
		t.Fatalf("flush: %v (%+v)", err, st)
	}
	return st
}

func TestEventsPendingSettle(t *testing.T) {
	const n = 20
	s, rc := startEvents(t, n, Faults{StripePendingShare: 1, StripePendingFor: 20 * time.Millisecond, StripeFailedShare: 0.5}, EventsConfig{})
	ids := refundAll(t, s, n)
	st := flush(t, s)
	if st.PendingUntold != 0 || st.SettlesScheduled != 0 || st.Pending != 0 {
		t.Errorf("stats %+v: want nothing pending", st)
	}
	if req := s.Stats().Requests; req[routeNames[routeGetRefund]] != 0 || req[routeNames[routeListRefunds]] != 0 {
		t.Errorf("requests %v: the events told without a GET", req)
	}
	byRefund := map[string][]received{}
	for _, r := range rc.events() {
		var re stripe.Refund
		if err := json.Unmarshal(r.ev.Data.Raw, &re); err != nil {
			t.Fatal(err)
		}
		byRefund[re.ID] = append(byRefund[re.ID], r)
		if r.ev.APIVersion != "2023-10-16" || r.ev.Livemode || r.ev.PendingWebhooks != 1 || string(r.raw["object"]) != `"event"` {
			t.Errorf("event %s: %v", r.ev.ID, r.raw)
		}
	}
	failed := 0
	for _, id := range ids {
		evs := byRefund[id]
		types := map[string]stripe.Refund{}
		for _, r := range evs {
			var re stripe.Refund
			json.Unmarshal(r.ev.Data.Raw, &re)
			types[string(r.ev.Type)] = re
		}
		if types[EventRefundCreated].Status != stripe.RefundStatusPending {
			t.Errorf("%s: refund.created %+v", id, types[EventRefundCreated])
		}
		up, ok := types[EventRefundUpdated]
		if !ok {
			t.Fatalf("%s: no refund.updated in %d events", id, len(evs))
		}
		if _, ok := types[EventChargeRefundUpdated]; !ok {
			t.Errorf("%s: no charge.refund.updated", id)
		}
		_, hasFailed := types[EventRefundFailed]
		switch up.Status {
		case stripe.RefundStatusSucceeded:
			if hasFailed || up.FailureReason != "" {
				t.Errorf("%s: succeeded with %+v", id, up)
			}
		case stripe.RefundStatusFailed:
			failed++
			if !hasFailed || up.FailureReason != FailureReasonPendingFailed {
				t.Errorf("%s: failed without refund.failed or reason: %+v", id, up)
			}
		default:
			t.Errorf("%s: refund.updated status %s", id, up.Status)
		}
	}
	if failed == 0 || failed == n {
		t.Errorf("%d of %d failed: want about half", failed, n)
	}

	// The event's object is the refund as GET shows it.
	last := rc.events()[len(rc.events())-1]
	var re stripe.Refund
	json.Unmarshal(last.ev.Data.Raw, &re)
	req, _ := http.NewRequest("GET", s.URL()+"/v1/refunds/"+re.ID, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, res)
	var data struct {
		Object json.RawMessage `json:"object"`
	}
	json.Unmarshal(last.raw["data"], &data)
	if strings.TrimSpace(got) != string(data.Object) {
		t.Errorf("GET %s\nevent %s", got, data.Object)
	}
}

func TestEventsPendingNeverSettles(t *testing.T) {
	s, rc := startEvents(t, 2, Faults{StripePendingShare: 1}, EventsConfig{})
	refundAll(t, s, 2)
	st := flush(t, s)
	if st.PendingUntold != 2 || st.Sent != 2 || len(rc.events()) != 2 {
		t.Errorf("stats %+v, %d received: want 2 refund.created and 2 untold", st, len(rc.events()))
	}
	for _, r := range s.Refunds() {
		if r.Status != StatusPending {
			t.Errorf("%+v: want pending", r)
		}
	}
}

// TestEventsCancel: a requires_action refund canceled through the API is
// told as Stripe tells it: refund.updated and charge.refund.updated, the
// refund canceled, its previous status requires_action, the cancel's
// request and idempotency key named.
func TestEventsCancel(t *testing.T) {
	s, rc := startEvents(t, 1, Faults{RequiresActionShare: 1}, EventsConfig{})
	id := refundAll(t, s, 1)[0]
	c := newClients(s, clientOpts{keepAlive: true})
	p := &stripe.RefundCancelParams{}
	p.SetIdempotencyKey("cancel-key")
	if _, err := c.refunds.Cancel(id, p); err != nil {
		t.Fatal(err)
	}
	flush(t, s)
	var got []string
	for _, r := range rc.events() {
		got = append(got, string(r.ev.Type))
		if r.ev.Type == EventRefundCreated {
			continue
		}
		var re stripe.Refund
		if err := json.Unmarshal(r.ev.Data.Raw, &re); err != nil {
			t.Fatal(err)
		}
		if re.ID != id || re.Status != stripe.RefundStatusCanceled || r.ev.Data.PreviousAttributes["status"] != StatusRequiresAction {
			t.Errorf("%s: refund %s %s, previous %v", r.ev.Type, re.ID, re.Status, r.ev.Data.PreviousAttributes)
		}
		if r.ev.Request == nil || r.ev.Request.IdempotencyKey != "cancel-key" || r.ev.Request.ID == "" {
			t.Errorf("%s: request %+v, want the cancel's", r.ev.Type, r.ev.Request)
		}
	}
	slices.Sort(got)
	if want := []string{EventChargeRefundUpdated, EventRefundCreated, EventRefundUpdated}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// TestEventsPendingSettlesByClock: a request sees the status as of the
// simulator's clock, settling what is due before the settler does.
func TestEventsPendingSettlesByClock(t *testing.T) {
	s, rc := startEvents(t, 1, Faults{StripePendingShare: 1, StripePendingFor: time.Hour}, EventsConfig{})
	var clock atomic.Int64
	clock.Store(time.Now().Unix())
	s.now = func() time.Time { return time.Unix(clock.Load(), 0) } // before any request: nothing reads it yet
	refundAll(t, s, 1)
	if r := s.Refunds()[0]; r.Status != StatusPending {
		t.Fatalf("%+v: want pending", r)
	}
	clock.Add(2 * 3600)
	if r := s.Refunds()[0]; r.Status != StatusSucceeded {
		t.Errorf("%+v: want succeeded an hour on", r)
	}
	st := flush(t, s)
	if st.PendingUntold != 0 || len(rc.events()) != 3 {
		t.Errorf("stats %+v, %d received", st, len(rc.events()))
	}
}

func TestEventsRetryAfter500(t *testing.T) {
	s, rc := startEvents(t, 5, Faults{}, EventsConfig{})
	rc.fail.Store(4)
	refundAll(t, s, 5)
	st := flush(t, s)
	if st.Retries != 4 || st.Delivered != 5 || st.Sent != 5 || len(rc.events()) != 5 {
		t.Errorf("stats %+v, %d received: want 4 retries, 5 delivered", st, len(rc.events()))
	}
}

func TestEventsDuplicatesAndReorder(t *testing.T) {
	const n = 200
	f := Faults{StripeEventsDuplicateShare: 0.3, StripeEventsReorderShare: 0.2, StripeEventsReorderDelay: 300 * time.Millisecond}
	s, rc := startEvents(t, n, f, EventsConfig{})
	refundAll(t, s, n)
	st := flush(t, s)
	got := rc.events()
	if st.Sent != n || int64(len(got)) != n+st.Duplicates || st.Delivered != int64(len(got)) {
		t.Errorf("stats %+v, %d received", st, len(got))
	}
	if st.Duplicates < 40 || st.Duplicates > 80 || st.Reordered < 20 || st.Reordered > 60 {
		t.Errorf("stats %+v: want about 60 duplicates and 40 reordered of %d", st, n)
	}
	seen, twice := map[string]int{}, 0
	first := map[string]int{} // an event's first arrival
	for i, r := range got {
		if seen[r.ev.ID]++; seen[r.ev.ID] == 2 {
			twice++
		}
		if _, ok := first[r.ev.ID]; !ok {
			first[r.ev.ID] = i
		}
	}
	if int64(twice) != st.Duplicates {
		t.Errorf("%d events received twice, %d duplicates", twice, st.Duplicates)
	}
	// Every reordered event but the last few made is overtaken by the next.
	for k := 1; k < n-5; k++ {
		if !s.core.Hit(f.StripeEventsReorderShare, uint64(k), sim.KnobStripeEventsReorder) {
			continue
		}
		id, next := sim.Padded("evt_sim", 14, k), sim.Padded("evt_sim", 14, k+1)
		if first[next] > first[id] && !s.core.Hit(f.StripeEventsReorderShare, uint64(k+1), sim.KnobStripeEventsReorder) {
			t.Errorf("reordered %s arrived before %s", id, next)
		}
	}
}

func TestEventsRolledSecret(t *testing.T) {
	s, rc := startEvents(t, 12, Faults{}, EventsConfig{Secrets: testSecrets, RollAfter: 4, RollOverlap: 2})
	refundAll(t, s, 12)
	flush(t, s)
	want := [][]int{{0}, {0}, {0}, {0}, {0, 1}, {0, 1}, {1}, {1}, {1, 2}, {1, 2}, {2}, {2}}
	got := rc.events()
	if len(got) != 12 {
		t.Fatalf("%d events", len(got))
	}
	for _, r := range got {
		var k int
		fmt.Sscanf(r.ev.ID, "evt_sim%d", &k)
		if !slices.Equal(r.by, want[k-1]) || strings.Count(r.header, "v1=") != len(want[k-1]) {
			t.Errorf("event %d: verified by secrets %v (%s), want %v", k, r.by, r.header, want[k-1])
		}
	}
}

func TestEventsForgedRefused(t *testing.T) {
	const n = 40
	s, rc := startEvents(t, n, Faults{StripeEventsForgedShare: 0.5}, EventsConfig{})
	refundAll(t, s, n)
	st := flush(t, s)
	rc.mu.Lock()
	refused := rc.refused
	rc.mu.Unlock()
	if st.Forged < 10 || int64(refused) != st.Forged || st.ForgedAccepted != 0 || st.Delivered != n || len(rc.events()) != n {
		t.Errorf("stats %+v, %d refused, %d received", st, refused, len(rc.events()))
	}
	// A receiver that accepts them is counted: it should have refused them.
	hs := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hs.Close()
	s3 := start(t, Config{Charges: GenerateCharges(n, 1), Faults: Faults{StripeEventsForgedShare: 1},
		Events: EventsConfig{URL: hs.URL, Secrets: testSecrets[:1]}})
	refundAll(t, s3, 4)
	if st := flush(t, s3); st.Forged != 4 || st.ForgedAccepted != 4 {
		t.Errorf("accepting receiver: %+v", st)
	}
}

func TestEventsConfig(t *testing.T) {
	secret := "whsec_do_not_print"
	for _, ev := range []EventsConfig{
		{URL: "http://example.com/stripe/events", Secrets: []string{secret}},
		{URL: "http://127.0.0.1:1/stripe/events"},
		{URL: "http://127.0.0.1:1/stripe/events", Secrets: []string{"sk_" + secret}},
		{URL: "http://127.0.0.1:1/stripe/events", Secrets: []string{secret}, RollAfter: -1},
	} {
		_, err := Start(Config{Events: ev})
		if err == nil {
			t.Errorf("%+v: started", ev)
		} else if strings.Contains(err.Error(), "do_not_print") {
			t.Errorf("error %q shows the secret", err)
		}
	}
}

// TestEventsClose: Close stops the settler with refunds still to settle.
func TestEventsClose(t *testing.T) {
	s, _ := startEvents(t, 1, Faults{StripePendingShare: 1, StripePendingFor: time.Hour}, EventsConfig{})
	refundAll(t, s, 1)
	s.Close()
	if st := s.EventStats(); st.SettlesScheduled != 1 || st.PendingUntold != 1 {
		t.Errorf("%+v", st)
	}
}
