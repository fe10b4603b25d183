package stripesim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/refundkit/refundkit/refund/paypalsim"
)

// maxControlBody bounds what a control request may upload (charges files
// are JSON lines of a few hundred bytes each).
const maxControlBody = 256 << 20

// The control endpoints, routed under /_sim/ (routes.go lists them).

func (s *Server) getFaults(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) setFaults(w http.ResponseWriter, r *http.Request) {
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
}

func (s *Server) forgetKeys(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]int{"forgotten": s.ForgetKeys()})
}

func (s *Server) getStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) settle(w http.ResponseWriter, r *http.Request) {
	if err := s.Settle(r.Context()); err != nil {
		return // the client went away
	}
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) listAllRefunds(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, re := range s.Refunds() {
		if err := enc.Encode(re); err != nil {
			return // the client went away
		}
	}
	for _, re := range s.paypal.Refunds() {
		if err := enc.Encode(re); err != nil {
			return
		}
	}
	bw.Flush()
}

func (s *Server) addCharges(w http.ResponseWriter, r *http.Request) {
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
}

func (s *Server) addCaptures(w http.ResponseWriter, r *http.Request) {
	captures, err := paypalsim.ReadCaptures(io.LimitReader(r.Body, maxControlBody), "<body>")
	if err != nil {
		controlError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.paypal.AddCaptures(captures...); err != nil {
		controlError(w, http.StatusConflict, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"added": len(captures)})
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
