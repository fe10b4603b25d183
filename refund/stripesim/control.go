package stripesim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
)

// maxControlBody bounds what a control request may upload (charges files
// are JSON lines of a few hundred bytes each).
const maxControlBody = 256 << 20

// serveControl answers the /_sim/ endpoints that scripts use to steer and
// check the simulator. They need no key: the server is on loopback only.
//
//	GET  /_sim/faults       the fault knobs in force
//	POST /_sim/faults       replace the fault knobs (JSON Faults; absent = 0),
//	                        rate limits included: {"rate_limits":{"mode":"test"}}
//	POST /_sim/forget-keys  forget completed idempotency keys
//	GET  /_sim/stats        counters (JSON Stats)
//	POST /_sim/settle       wait for requests still running behind a gateway
//	                        timeout, then answer the counters (JSON Stats)
//	GET  /_sim/refunds      every refund, oldest first, as JSON lines
//	POST /_sim/charges      add charges given as JSON lines
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	switch r.Method + " " + r.URL.Path {
	case "GET /_sim/faults":
		writeJSON(w, http.StatusOK, s.Faults())
	case "POST /_sim/faults":
		var f Faults
		if err := json.NewDecoder(io.LimitReader(r.Body, maxControlBody)).Decode(&f); err != nil {
			controlError(w, http.StatusBadRequest, "faults: "+err.Error())
			return
		}
		if err := s.SetFaults(f); err != nil {
			controlError(w, http.StatusBadRequest, "faults: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, f)
	case "POST /_sim/forget-keys":
		writeJSON(w, http.StatusOK, map[string]int{"forgotten": s.ForgetKeys()})
	case "GET /_sim/stats":
		writeJSON(w, http.StatusOK, s.Stats())
	case "POST /_sim/settle":
		if err := s.Settle(r.Context()); err != nil {
			return // the client went away
		}
		writeJSON(w, http.StatusOK, s.Stats())
	case "GET /_sim/refunds":
		w.Header().Set("Content-Type", "application/x-ndjson")
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		for _, re := range s.Refunds() {
			if err := enc.Encode(re); err != nil {
				return // the client went away
			}
		}
		bw.Flush()
	case "POST /_sim/charges":
		charges, err := ReadCharges(io.LimitReader(r.Body, maxControlBody), "<body>")
		if err != nil {
			controlError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := s.AddCharges(charges...); err != nil {
			controlError(w, http.StatusConflict, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"added": len(charges)})
	default:
		controlError(w, http.StatusNotFound, "no control endpoint "+r.Method+" "+r.URL.Path)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // messages quote "<body>" and ids as they are
	if err := enc.Encode(v); err != nil {
		controlError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// controlError answers a control request with {"error": "..."}.
func controlError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
