package stripesim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
)

// maxControlBody bounds a control request's upload.
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

// addSeeds is a control endpoint that adds what read reads from the body.
func addSeeds[T any](read func(io.Reader, string) ([]T, error), add func(...T) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		seeds, err := read(io.LimitReader(r.Body, maxControlBody), "<body>")
		if err != nil {
			controlError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := add(seeds...); err != nil {
			controlError(w, http.StatusConflict, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"added": len(seeds)})
	}
}

func (s *Server) listAdyenPayments(w http.ResponseWriter, r *http.Request) {
	writeJSONLines(w, s.adyen.Payments())
}

func (s *Server) listAdyenRefunds(w http.ResponseWriter, r *http.Request) {
	writeJSONLines(w, s.adyen.Refunds())
}

func (s *Server) flushAdyen(w http.ResponseWriter, r *http.Request) {
	st, err := s.adyen.Flush(r.Context())
	if err != nil {
		return // the client went away, or gave up waiting
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) forgetAdyenKeys(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]int{"forgotten": s.adyen.ForgetKeys()})
}

// writeJSONLines answers vs as JSON lines.
func writeJSONLines[T any](w http.ResponseWriter, vs []T) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return // the client went away
		}
	}
	bw.Flush()
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
