package sim

import (
	"fmt"
	"net/http"
	"strconv"
)

// Answer is an endpoint's outcome before it is written.
type Answer struct {
	Status int
	Body   []byte
	// Save keeps it under the key (not a validation error's).
	Save bool
	// Drop: close the connection instead of answering.
	Drop bool
	// Gateway: a gateway's error reaches the client instead.
	Gateway bool
	// RequestID (the API's id of the request) and Ref (what it made) are
	// saved with it.
	RequestID, Ref string
}

// Error is the one error object of the simulator's APIs: each API fills
// its own fields and leaves the others empty, so the JSON holds exactly
// its shape, in its order (Stripe: type, code, message, param, charge;
// PayPal: name, message, debug_id, details; Adyen: status, errorCode,
// message, errorType, pspReference).
type Error struct {
	Status       int      `json:"status,omitempty"`
	Type         string   `json:"type,omitempty"`
	Name         string   `json:"name,omitempty"`
	Code         string   `json:"code,omitempty"`
	ErrorCode    string   `json:"errorCode,omitempty"`
	Message      string   `json:"message"`
	Param        string   `json:"param,omitempty"`
	Charge       string   `json:"charge,omitempty"`
	DebugID      *string  `json:"debug_id,omitempty"` // PayPal's, "" in a gateway's answer
	Details      []Detail `json:"details,omitempty"`
	ErrorType    string   `json:"errorType,omitempty"`
	PSPReference string   `json:"pspReference,omitempty"`
}

// Detail is one issue of a PayPal error.
type Detail struct {
	Field       string `json:"field,omitempty"`
	Location    string `json:"location,omitempty"`
	Issue       string `json:"issue"`
	Description string `json:"description,omitempty"`
}

// Fail is an error answer with body e (as JSON); save keeps it under the key.
func Fail(status int, e any, save bool) Answer {
	return Answer{Status: status, Body: MustJSON(e), Save: save}
}

// GatewayMessage is the message of a gateway's answer in an API's shape.
func GatewayMessage(status int) string {
	return fmt.Sprintf("An error occurred at the gateway in front of the API (%d %s).", status, GatewayText(status))
}

// Write writes an API's own JSON answer with its headers, given as name
// and value pairs; a pair with an empty value is left out.
func Write(w http.ResponseWriter, status int, body []byte, headers ...string) {
	send(w, "application/json", status, body, headers...)
}

func send(w http.ResponseWriter, contentType string, status int, body []byte, headers ...string) {
	h := w.Header()
	h["Content-Type"] = []string{contentType}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] != "" {
			h[headers[i]] = []string{headers[i+1]}
		}
	}
	w.WriteHeader(status)
	w.Write(body)
}

// WriteGatewayAnswer writes a gateway's own answer: none of the API's
// headers, and an HTML page unless jsonBody is given.
func WriteGatewayAnswer(w http.ResponseWriter, status int, jsonBody []byte) {
	if jsonBody != nil {
		Write(w, status, jsonBody)
		return
	}
	text := GatewayText(status)
	send(w, "text/html", status, fmt.Appendf(nil, "<html>\r\n<head><title>%d %s</title></head>\r\n<body>\r\n<center><h1>%d %s</h1></center>\r\n<hr><center>gateway</center>\r\n</body>\r\n</html>\r\n", status, text, status, text))
}

// GatewayText is the reason phrase of a gateway's status.
func GatewayText(status int) string {
	if text := http.StatusText(status); text != "" {
		return text
	}
	return "Server Error"
}

// DropConnection closes the connection without a byte of answer.
func DropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // HTTP/2, a recorder: abort the handler
}
