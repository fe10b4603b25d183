// Package httpx is what the providers' HTTP clients share: their
// connections, one way to send a request and read its answer, and the one
// mapping of an answer that is not a success to a *refund.Failure (Adyen's
// and PayPal's).
package httpx

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/refundkit/refundkit/refund"
)

// Client keeps conns connections open per host and gives up a call after 80 s.
func Client(conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = conns
	return &http.Client{Transport: t, Timeout: 80 * time.Second}
}

// API is a provider's HTTP API: where it is and the connections to it.
type API struct {
	base string
	http *http.Client
}

// NewAPI is the API at base (def when empty), keeping conns connections open.
func NewAPI(base, def string, conns int) API {
	return API{base: strings.TrimSuffix(cmp.Or(base, def), "/"), http: Client(conns)}
}

// APIBase is the API the client calls.
func (a API) APIBase() string { return a.base }

// Send sends method path with body (nil: none) and header, pairs of name
// and value, and reads the answer's body, up to 1 MiB. An error is no
// answer (refund.NoAnswer).
func (a API) Send(ctx context.Context, method, path string, body []byte, header ...string) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return nil, nil, refund.NoAnswer(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := a.http.Do(req)
	if err != nil {
		return nil, nil, refund.NoAnswer(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, nil, refund.NoAnswer(err)
	}
	return res, data, nil
}

// Provider names a provider in its failures.
type Provider struct {
	Name    string // errors start with it: "adyen"
	Title   string // "from something in front of Adyen"
	NotOwn  string // what an answer not the provider's lacks: "no Adyen error body"
	RefName string // what names an answer for the provider's support: "pspReference"
}

// Decode reads a success's body into out; one not JSON is refund.Unreadable.
func (p Provider) Decode(status int, data []byte, out any) error {
	if err := json.Unmarshal(data, out); err != nil {
		return refund.Unreadable(p.Name, status, err)
	}
	return nil
}

// Failure classifies an answer of status that is not a success: code, msg
// and ref (for the provider's support) are what its body says. An answer
// not the provider's own is a proxy's: no answer, repeated under the same
// key. rule, the provider's, decides when it returns true; then 429 is
// repeated, 401 and 403 halt the run, any other is final.
func (p Provider) Failure(status int, own bool, code, msg, ref string, rule func(f *refund.Failure) bool) *refund.Failure {
	f := &refund.Failure{Class: refund.ClassFinal, Status: status, Code: cmp.Or(code, "http_"+strconv.Itoa(status)),
		Message: cmp.Or(msg, "no error message")}
	switch {
	case !own:
		f.Class, f.Status, f.Code = refund.ClassRetry, 0, "gateway_"+strconv.Itoa(status)
		f.Message = fmt.Sprintf("%d from something in front of %s (%s)", status, p.Title, p.NotOwn)
	case rule(f):
	case status == http.StatusTooManyRequests:
		f.Class, f.RateLimited, f.AccountLimit = refund.ClassRetry, true, true
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		f.Class = refund.ClassFatal
	}
	if ref != "" {
		f.Message += " (" + p.RefName + " " + ref + ")"
	}
	f.Err = fmt.Errorf("%s: %d %s: %s", p.Name, status, f.Code, f.Message)
	return f
}

// Payments keeps what a look-up read of payments whose amount and
// currency cannot change (a captured charge, a capture), for the payment
// check that follows it: the two are then one request.
type Payments struct {
	mu sync.Mutex
	m  map[string]refund.PaymentInfo
}

// Put keeps info for payment id.
func (p *Payments) Put(id string, info refund.PaymentInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil || len(p.m) >= 4096 { // the items in flight, many times over
		p.m = make(map[string]refund.PaymentInfo)
	}
	p.m[id] = info
}

// Get returns what is kept for id, said Kept.
func (p *Payments) Get(id string) (refund.PaymentInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	info, ok := p.m[id]
	info.Kept = ok
	return info, ok
}
