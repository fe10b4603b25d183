package paypal

// One request to PayPal's API with the client's access token, and its
// answer read.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// maxAnswer bounds the body of an answer that is read.
const maxAnswer = 1 << 20

// do sends one request with the current access token and decodes a
// success into out; its error is a *refund.Failure. A 401 from PayPal
// (an expired or revoked token) renews the token and sends the same
// request again once, with the same body and the same requestID.
func (c *Client) do(ctx context.Context, method, path string, body []byte, requestID string, out any) (int, error) {
	stale := ""
	for try := 0; ; try++ {
		token, err := c.accessToken(ctx, stale)
		if err != nil {
			return 0, err
		}
		status, debugID, data, err := c.send(ctx, method, path, body, requestID, token)
		if err != nil {
			return 0, refund.NoAnswer(err)
		}
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
func (c *Client) send(ctx context.Context, method, path string, body []byte, requestID, token string) (status int, debugID string, data []byte, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, "", nil, err
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
	res, err := c.http.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer res.Body.Close()
	data, err = io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return 0, "", nil, err
	}
	return res.StatusCode, res.Header.Get(wire.DebugIDHeader), data, nil
}
