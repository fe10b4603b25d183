package paypal

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/httpx"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// do sends one request with the current access token and decodes a
// success into out; its error is a *refund.Failure. A 401 from PayPal (a
// token expired or revoked) renews the token and sends the same request
// again once, with the same body and requestID.
func (c *Client) do(ctx context.Context, method, path string, body []byte, requestID string, out any) (int, error) {
	stale := ""
	for try := 0; ; try++ {
		token, err := c.accessToken(ctx, stale)
		if err != nil {
			return 0, err
		}
		res, data, err := c.send(ctx, method, path, body, requestID, token)
		if err != nil {
			return 0, err
		}
		status, debugID := res.StatusCode, res.Header.Get(wire.DebugIDHeader)
		if status >= 200 && status < 300 { // 200 or 201; any other has no refund to read
			if err := json.Unmarshal(data, out); err != nil {
				return status, refund.Unreadable("paypal", status, err)
			}
			return status, nil
		}
		if status == http.StatusUnauthorized && debugID != "" && try == 0 {
			stale = token
			continue
		}
		return status, classify(status, debugID, data, false)
	}
}

// send makes one HTTP request and reads its answer.
func (c *Client) send(ctx context.Context, method, path string, body []byte, requestID, token string) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, nil, refund.NoAnswer(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		// The whole refund in the answer, custom_id and amount included
		// (the default, return=minimal, gives only id and status).
		req.Header.Set("Prefer", "return=representation")
	}
	if requestID != "" {
		req.Header.Set(wire.RequestIDHeader, requestID)
	}
	return httpx.Do(c.http, req)
}
