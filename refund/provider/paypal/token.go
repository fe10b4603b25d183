package paypal

// The OAuth2 access token (client credentials) every call of a client
// shares: renewed before it expires, and when PayPal refuses it.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// renewBefore is how long before its expiry a token is renewed.
const renewBefore = 5 * time.Minute

// tokens holds the current access token. Its zero value has none.
type tokens struct {
	mu      sync.Mutex
	token   string
	expires time.Time
}

// tokenAnswer is the token endpoint's answer.
type tokenAnswer struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int64  `json:"expires_in"` // seconds
}

// accessToken returns a token good for at least renewBefore (or half its
// life, for a short-lived one); stale is a token PayPal refused, dropped
// unless another call renewed it already. Calls wait for one fetch.
func (c *Client) accessToken(ctx context.Context, stale string) (string, error) {
	t := &c.tokens
	t.mu.Lock()
	defer t.mu.Unlock()
	if stale != "" && t.token == stale {
		t.token = ""
	}
	if t.token != "" && c.now().Before(t.expires) {
		return t.token, nil
	}
	a, err := c.fetchToken(ctx)
	if err != nil {
		return "", err
	}
	life := time.Duration(a.ExpiresIn) * time.Second
	margin := min(renewBefore, life/2)
	t.token, t.expires = a.AccessToken, c.now().Add(life-margin)
	return t.token, nil
}

// fetchToken asks for a new token. Neither the secret nor the token ever
// appears in its errors.
func (c *Client) fetchToken(ctx context.Context) (tokenAnswer, error) {
	form := url.Values{"grant_type": {"client_credentials"}}.Encode()
	basic := base64.StdEncoding.EncodeToString([]byte(c.id + ":" + c.secret)) // as http.Request.SetBasicAuth
	res, data, err := c.Send(ctx, http.MethodPost, "/v1/oauth2/token", []byte(form), "Authorization", "Basic "+basic,
		"Content-Type", "application/x-www-form-urlencoded", "Accept", "application/json")
	if err != nil {
		return tokenAnswer{}, err
	}
	if res.StatusCode != http.StatusOK {
		return tokenAnswer{}, classify(res.StatusCode, res.Header.Get(wire.DebugIDHeader), data, true)
	}
	var a tokenAnswer
	if err := json.Unmarshal(data, &a); err != nil || a.AccessToken == "" || a.ExpiresIn <= 0 {
		if err == nil {
			err = fmt.Errorf("no access_token or expires_in")
		}
		return tokenAnswer{}, refund.Unreadable("paypal", res.StatusCode, err)
	}
	return a, nil
}
