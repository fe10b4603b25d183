package sim

import (
	"fmt"
	"net/http"
	"strconv"
)

// WriteGatewayAnswer writes what a gateway in front of the API answers on
// its own: none of the API's headers (no request id, no idempotency key),
// and an HTML page unless jsonBody, the API's own error shape, is given.
func WriteGatewayAnswer(w http.ResponseWriter, status int, jsonBody []byte) {
	text := GatewayText(status)
	body := jsonBody
	h := w.Header()
	if body != nil {
		h["Content-Type"] = []string{"application/json"}
	} else {
		body = fmt.Appendf(nil, "<html>\r\n<head><title>%d %s</title></head>\r\n<body>\r\n<center><h1>%d %s</h1></center>\r\n<hr><center>gateway</center>\r\n</body>\r\n</html>\r\n", status, text, status, text)
		h["Content-Type"] = []string{"text/html"}
	}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	w.Write(body)
}

// GatewayText is the reason phrase of a gateway's status.
func GatewayText(status int) string {
	if text := http.StatusText(status); text != "" {
		return text
	}
	return "Server Error"
}

// DropConnection closes the connection without a byte of answer, as a
// load balancer or a network failure would after the work was done.
func DropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		// Not hijackable (HTTP/2, a recorder): abort the handler instead.
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}
