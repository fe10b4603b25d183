package wire

// PayPal's webhook signature, as a receiver checks it offline and as the
// simulator makes it: the headers PayPal sends, the one message they sign,
// and a signer. Kept here so the two cannot drift apart.

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"hash/crc32"
	"net/http"
	"strconv"
	"time"
)

// The headers of a webhook delivery.
const (
	TransmissionIDHeader   = "Paypal-Transmission-Id"
	TransmissionTimeHeader = "Paypal-Transmission-Time"
	TransmissionSigHeader  = "Paypal-Transmission-Sig"
	CertURLHeader          = "Paypal-Cert-Url"
	AuthAlgoHeader         = "Paypal-Auth-Algo"
)

// AuthAlgo is the one signature algorithm PayPal uses and refundkit takes.
const AuthAlgo = "SHA256withRSA"

// CertPath is where PayPal serves its signing certificates; a cert URL
// elsewhere is no PayPal certificate (a simulator serves them there too).
const CertPath = "/v1/notifications/certs/"

// Headers are the five values that sign one delivery: kept beside its raw
// body, they let the event be verified again later.
type Headers struct {
	TransmissionID   string `json:"transmission_id"`
	TransmissionTime string `json:"transmission_time"` // RFC 3339, as sent: it is signed verbatim
	TransmissionSig  string `json:"transmission_sig"`  // base64
	CertURL          string `json:"cert_url"`
	AuthAlgo         string `json:"auth_algo"`
}

// HeadersOf reads the five values from a request's header.
func HeadersOf(h http.Header) Headers {
	return Headers{
		TransmissionID:   h.Get(TransmissionIDHeader),
		TransmissionTime: h.Get(TransmissionTimeHeader),
		TransmissionSig:  h.Get(TransmissionSigHeader),
		CertURL:          h.Get(CertURLHeader),
		AuthAlgo:         h.Get(AuthAlgoHeader),
	}
}

// Set writes the five values into h, as PayPal sends them.
func (hs Headers) Set(h http.Header) {
	h.Set(TransmissionIDHeader, hs.TransmissionID)
	h.Set(TransmissionTimeHeader, hs.TransmissionTime)
	h.Set(TransmissionSigHeader, hs.TransmissionSig)
	h.Set(CertURLHeader, hs.CertURL)
	h.Set(AuthAlgoHeader, hs.AuthAlgo)
}

// Message is what PayPal signs: transmission id, time, the receiver's
// webhook id and the CRC32 (IEEE) of the raw body in unsigned decimal,
// joined by '|'. The body enters only through its CRC: the signature binds
// the delivery to the webhook, the CRC the body to the delivery.
func Message(transmissionID, transmissionTime, webhookID string, body []byte) []byte {
	b := make([]byte, 0, len(transmissionID)+len(transmissionTime)+len(webhookID)+14)
	b = append(b, transmissionID...)
	b = append(b, '|')
	b = append(b, transmissionTime...)
	b = append(b, '|')
	b = append(b, webhookID...)
	b = append(b, '|')
	return strconv.AppendUint(b, uint64(crc32.ChecksumIEEE(body)), 10)
}

// Signer signs deliveries as PayPal does, for the simulator and tests:
// Key is the private key of the certificate served at CertURL.
type Signer struct {
	Key     *rsa.PrivateKey
	CertURL string
}

// Sign returns the headers of body delivered to webhookID at t.
func (s *Signer) Sign(body []byte, webhookID, transmissionID string, t time.Time) Headers {
	at := t.UTC().Format(time.RFC3339)
	sum := sha256.Sum256(Message(transmissionID, at, webhookID, body))
	sig, err := rsa.SignPKCS1v15(rand.Reader, s.Key, crypto.SHA256, sum[:])
	if err != nil {
		// Only a key unfit for SHA-256 fails here: a fault of the test's.
		panic("wire: signing a webhook: " + err.Error())
	}
	return Headers{TransmissionID: transmissionID, TransmissionTime: at,
		TransmissionSig: base64.StdEncoding.EncodeToString(sig), CertURL: s.CertURL, AuthAlgo: AuthAlgo}
}
