// Package wire is what Adyen's client, its notification receiver and the
// simulator must read and write alike: keys, references, notifications
// and their HMAC signature.
package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
)

// KeyTTL is how long refundkit trusts Adyen to keep an idempotency key:
// Adyen says 31 days now, its legacy page 7; the lower cannot be ruled out.
const KeyTTL = 7 * 24 * time.Hour

// Limits of Adyen's fields.
const (
	MaxKey       = 64 // Idempotency-Key
	MaxReference = 80 // a refund's reference (merchantReference in its notifications)
)

const (
	keyPrefix = "refundkit-"
	refPrefix = "refundkit:"
)

// Key is the Idempotency-Key of a refund attempt: a digest, since
// refundkit's own key may pass Adyen's 64 characters.
func Key(batch, item string, attempt int) string {
	sum := sha256.Sum256([]byte(batch + "\x00" + item + "\x00" + strconv.Itoa(attempt)))
	return keyPrefix + hex.EncodeToString(sum[:24])
}

// Reference is refundkit:<batch>:<item>:<attempt>, which notifications
// echo as merchantReference; a batch holds no ':'.
func Reference(batch, item string, attempt int) string {
	return refPrefix + batch + ":" + item + ":" + strconv.Itoa(attempt)
}

// MaxBatchItem is how long batch and item may be in a reference (attempts of 4 digits).
const MaxBatchItem = MaxReference - len(refPrefix) - 2 - 4

// ReferenceFits reports whether batch and item fit every attempt's reference.
func ReferenceFits(batch, item string) bool { return len(batch)+len(item) <= MaxBatchItem }

// ParseReference reads back what Reference wrote.
func ParseReference(s string) (batch, item string, attempt int, ok bool) {
	rest, found := strings.CutPrefix(s, refPrefix)
	if !found {
		return "", "", 0, false
	}
	i, j := strings.IndexByte(rest, ':'), strings.LastIndexByte(rest, ':')
	if i <= 0 || j <= i+1 {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(rest[j+1:])
	if err != nil || n < 1 || strconv.Itoa(n) != rest[j+1:] {
		return "", "", 0, false
	}
	return rest[:i], rest[i+1 : j], n, true
}

// Event codes: those of a refund's outcome, and two others.
const (
	EventRefund         = "REFUND"            // success true: refunded; false: refused
	EventRefundFailed   = "REFUND_FAILED"     // a refund that succeeded failed later (the bank returned it)
	EventRefundReversed = "REFUNDED_REVERSED" // the refunded money came back to the merchant
	EventRefundPending  = "REFUND_PENDING"    // some payment methods: accepted, not done
	EventAuthorisation  = "AUTHORISATION"
	EventCapture        = "CAPTURE"
)

// RefundEvent reports an event code that speaks of a refund's outcome.
func RefundEvent(code string) bool {
	switch code {
	case EventRefund, EventRefundFailed, EventRefundReversed, EventRefundPending:
		return true
	}
	return false
}

// Amount is Adyen's money: value in minor units, currency in upper case.
type Amount struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

// RefundAnswer is Adyen's answer to a refund: "received", never an outcome.
type RefundAnswer struct {
	MerchantAccount     string `json:"merchantAccount"`
	PaymentPSPReference string `json:"paymentPspReference"`
	PSPReference        string `json:"pspReference"`
	Reference           string `json:"reference,omitempty"`
	Status              string `json:"status"`
	Amount              Amount `json:"amount"`
}

// Item is one NotificationRequestItem (success is "true" or "false").
type Item struct {
	AdditionalData      map[string]string `json:"additionalData,omitempty"`
	Amount              Amount            `json:"amount"`
	EventCode           string            `json:"eventCode"`
	EventDate           string            `json:"eventDate,omitempty"`
	MerchantAccountCode string            `json:"merchantAccountCode"`
	MerchantReference   string            `json:"merchantReference"`
	OriginalReference   string            `json:"originalReference,omitempty"`
	PSPReference        string            `json:"pspReference"`
	Reason              string            `json:"reason,omitempty"`
	Success             string            `json:"success"`
	PaymentMethod       string            `json:"paymentMethod,omitempty"`
	Operations          []string          `json:"operations,omitempty"`
}

// Request is the body of one notification request.
type Request struct {
	Live              string `json:"live"`
	NotificationItems []struct {
		NotificationRequestItem Item `json:"NotificationRequestItem"`
	} `json:"notificationItems"`
}

// Accepted is the answer Adyen waits for; anything else is retried.
const Accepted = "[accepted]"

// SignatureField is where an item's signature is, in additionalData.
const SignatureField = "hmacSignature"

// SigningString is what an item's signature is computed over.
func SigningString(it *Item) string {
	return strings.Join([]string{it.PSPReference, it.OriginalReference, it.MerchantAccountCode, it.MerchantReference,
		strconv.FormatInt(it.Amount.Value, 10), it.Amount.Currency, it.EventCode, it.Success}, ":")
}

// ErrBadHMACKey is ParseHMACKey's error.
var ErrBadHMACKey = errors.New("the HMAC key is not hex (Adyen shows it as 64 hex digits)")

// ParseHMACKey decodes the HMAC key as Adyen gives it, in hex.
func ParseHMACKey(s string) ([]byte, error) {
	k, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(k) == 0 {
		return nil, ErrBadHMACKey
	}
	return k, nil
}

// ParseHMACKeys decodes one HMAC key or several, separated by commas: while
// a key is rotated in Adyen's Customer Area, items come signed under the
// new one and the previous one, and items kept earlier stay signed under
// the previous one.
func ParseHMACKeys(s string) ([][]byte, error) {
	var keys [][]byte
	for _, part := range strings.Split(s, ",") {
		k, err := ParseHMACKey(part)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// NoKey reports keys that verify nothing: none, or one empty (under which
// anyone can sign).
func NoKey(keys [][]byte) bool {
	return len(keys) == 0 || slices.ContainsFunc(keys, func(k []byte) bool { return len(k) == 0 })
}

// Sign returns base64 of HMAC-SHA256 over SigningString under key.
func Sign(it *Item, key []byte) string { return base64.StdEncoding.EncodeToString(mac(it, key)) }

func mac(it *Item, key []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(SigningString(it)))
	return m.Sum(nil)
}

// SetSignature signs it in place (the simulator's, and tests').
func SetSignature(it *Item, key []byte) {
	if it.AdditionalData == nil {
		it.AdditionalData = make(map[string]string)
	}
	it.AdditionalData[SignatureField] = Sign(it, key)
}

// Verify reports whether it carries its signature under one of keys, each
// compared in constant time.
func Verify(it *Item, keys ...[]byte) bool {
	got, err := base64.StdEncoding.DecodeString(it.AdditionalData[SignatureField])
	if err != nil || len(got) == 0 {
		return false
	}
	ok := false
	for _, k := range keys {
		// Every key is tried: the time says not which. An empty key signs
		// what anyone can sign.
		ok = len(k) > 0 && hmac.Equal(got, mac(it, k)) || ok
	}
	return ok
}

// Notification is one accepted item as a store keeps it, signature
// included so that every reader verifies it again.
type Notification struct {
	V        int       `json:"v"`
	Received time.Time `json:"received"`
	Live     bool      `json:"live"`
	Item     Item      `json:"item"`
}

// Version is the version of Notification this build writes.
const Version = 1

// DedupKey is what makes two notifications one (Adyen's retries).
func DedupKey(it *Item) string {
	return it.EventCode + ":" + it.PSPReference + ":" + it.Success
}
