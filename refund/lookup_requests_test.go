package refund_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// chargeProxy stands before the simulator: it counts GET /v1/charges/{id},
// says every charge is not captured (an authorization), and answers the
// tooMany-th such GET with Stripe's 429.
type chargeProxy struct {
	mu      sync.Mutex
	gets    int
	limited int
	tooMany int // 0: never
}

func (p *chargeProxy) serve(t *testing.T, upstream string) *httptest.Server {
	u, _ := url.Parse(upstream)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(r *http.Response) error {
		if r.Request.Method != http.MethodGet || !strings.HasPrefix(r.Request.URL.Path, "/v1/charges/") {
			return nil
		}
		body, _ := io.ReadAll(r.Body)
		var m map[string]any
		if err := json.Unmarshal(body, &m); err == nil {
			m["captured"] = false
			body, _ = json.Marshal(m)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Del("Content-Length")
		return nil
	}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/charges/") {
			p.mu.Lock()
			p.gets++
			n := p.gets
			if n == p.tooMany {
				p.limited++
			}
			p.mu.Unlock()
			if n == p.tooMany {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// An item with its amount and no currency needs no payment read: none was
// sent before i34 (the look-up was GET /v1/refunds?charge=). On a charge not
// captured, i34's list() reads the payment anyway, outside e.read: a
// request no check asked for, neither paced nor retried.
func TestLookupSendsNoPaymentReadNoCheckNeeds(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	p := &chargeProxy{}
	px := p.serve(t, s.URL)
	o := run(t, s, filepath.Join(t.TempDir(), "j.jsonl"), `{"batch":"b","item":"i1","charge":"ch_sim0000001","amount":100}`+"\n", runOpts{url: px.URL, workers: 1})
	if o.err != nil {
		t.Fatal(o.err)
	}
	if p.gets > 1 {
		t.Errorf("%d GET /v1/charges/ch_sim0000001 for one item, want at most 1 (the look-up): a payment read no check needs", p.gets)
	}
}

// The payment read in list() answered 429: the summary must count it, and
// the pacer must hear of it. i34 swallows it: summary 0 rate-limited, and
// the read is sent again at once by checkPayment.
func TestLookupsPaymentRead429IsCounted(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	p := &chargeProxy{tooMany: 2} // the 1st GET is Find's, the 2nd list()'s Payment
	px := p.serve(t, s.URL)
	o := run(t, s, filepath.Join(t.TempDir(), "j.jsonl"), `{"batch":"b","item":"i1","charge":"ch_sim0000001","amount":100,"currency":"usd"}`+"\n", runOpts{url: px.URL, workers: 1,
		cfg: func(c *refund.Config) {
			c.Pacer = refund.NewPacer(refund.Limits{Global: 1000, List: 1000, Charges: 1000})
		}})
	if o.err != nil {
		t.Fatal(o.err)
	}
	if p.limited != 1 {
		t.Fatalf("the proxy answered %d 429s, want 1", p.limited)
	}
	if o.summary.RateLimited != int64(p.limited) {
		t.Errorf("summary says %d rate-limited, the provider answered %d 429s", o.summary.RateLimited, p.limited)
	}
	if r := o.summary.String(); !strings.Contains(r, "1 rate-limited") {
		t.Logf("summary: %s", r)
	}
}

// A charge with more refunds than its sublist holds: the look-up is two
// requests (GET /v1/charges/{id}, GET /v1/refunds?charge=), spent as one of
// the pacer's account budget (Facts.LookupRequests 0) and said as one in the
// summary (before i34: one GET /v1/refunds, one request).
