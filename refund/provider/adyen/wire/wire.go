// Package wire is what refundkit's Adyen client (refund/provider/adyen), its
// notification receiver (refund/provider/adyen/webhook) and the simulator
// (refund/sim/adyensim) must read and write alike: the idempotency key and
// reference that name a refund's batch, item and attempt, the notification
// Adyen posts, and its HMAC signature. Nothing here makes a call.
package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// KeyTTL is how long refundkit trusts Adyen to keep an idempotency key:
// Adyen's current page says "valid for a minimum period of 31 days after
// first submission", its legacy page (still linked, for older
// integrations) said 7 days. refundkit designs by the lower figure it
// cannot rule out for a given account.
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

// Key is the Idempotency-Key of a refund attempt: a digest of batch, item
// and attempt, since refundkit's own key (refundkit:<batch>:<item>:<n>)
// may pass Adyen's 64 characters.
func Key(batch, item string, attempt int) string {
	return keyPrefix + hex.EncodeToString(digest(batch, item, attempt)[:24])
}

func digest(batch, item string, attempt int) []byte {
	sum := sha256.Sum256([]byte(batch + "\x00" + item + "\x00" + strconv.Itoa(attempt)))
	return sum[:]
}

// Reference is a refund's reference, which Adyen echoes as the
// merchantReference of the refund's notifications, so that a notification
// names its item without the journal: refundkit:<batch>:<item>:<attempt>.
// A batch holds no ':', so the first and last ':' split it. It must fit
// Adyen's 80 characters (ReferenceFits), so an item whose batch and item
// do not fit is refused before anything is sent.
func Reference(batch, item string, attempt int) string {
	return refPrefix + batch + ":" + item + ":" + strconv.Itoa(attempt)
}

// MaxBatchItem is how long batch and item may be together: a reference
// holds them, the prefix, two ':' and an attempt of up to four digits.
const MaxBatchItem = MaxReference - len(refPrefix) - 2 - 4

// ReferenceFits reports whether the references of batch and item fit
// Adyen's 80 characters for every attempt a run can make.
func ReferenceFits(batch, item string) bool { return len(batch)+len(item) <= MaxBatchItem }

// ParseReference reads batch, item and attempt from a reference Reference
// wrote; ok is false for a reference that is not refundkit's.
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

// Event codes of the notifications that tell a refund's outcome.
const (
	EventRefund          = "REFUND"            // success true: refunded; false: refused
	EventRefundFailed    = "REFUND_FAILED"     // a refund that succeeded failed later (the bank returned it)
	EventRefundReversed  = "REFUNDED_REVERSED" // the refunded money came back to the merchant
	EventRefundWithData  = "REFUND_WITH_DATA"  // an unreferenced refund: not refundkit's kind, kept
	EventCancelOrRefund  = "CANCEL_OR_REFUND"  // kept, never refundkit's
	EventCaptureFailed   = "CAPTURE_FAILED"    // kept
	EventAuthorisation   = "AUTHORISATION"     // kept
	EventCancellation    = "CANCELLATION"      // kept
	EventCapture         = "CAPTURE"           // kept
	EventRefundPending   = "REFUND_PENDING"    // some payment methods: accepted, not done
	EventTechnicalCancel = "TECHNICAL_CANCEL"  // kept
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

// RefundAnswer is Adyen's 201 to a refund: "received", never an outcome.
type RefundAnswer struct {
	MerchantAccount     string `json:"merchantAccount"`
	PaymentPSPReference string `json:"paymentPspReference"`
	PSPReference        string `json:"pspReference"`
	Reference           string `json:"reference,omitempty"`
	Status              string `json:"status"`
	Amount              Amount `json:"amount"`
}

// Item is one NotificationRequestItem as Adyen posts it. success is the
// string "true" or "false", as Adyen writes it.
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

// Request is the body of one notification request: Adyen posts one or
// more items, and expects "[accepted]" once all are stored.
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

// SigningString is what an item's signature is computed over:
// pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success,
// an absent field as the empty string.
func SigningString(it *Item) string {
	return strings.Join([]string{it.PSPReference, it.OriginalReference, it.MerchantAccountCode, it.MerchantReference,
		strconv.FormatInt(it.Amount.Value, 10), it.Amount.Currency, it.EventCode, it.Success}, ":")
}

// ErrBadHMACKey: the HMAC key is not the hex string Adyen's Customer Area
// shows.
var ErrBadHMACKey = errors.New("the HMAC key is not hex (Adyen shows it as 64 hex digits)")

// ParseHMACKey decodes the HMAC key as Adyen gives it, in hex.
func ParseHMACKey(s string) ([]byte, error) {
	k, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(k) == 0 {
		return nil, ErrBadHMACKey
	}
	return k, nil
}

// Sign returns the signature of it under key (decoded, ParseHMACKey):
// base64 of HMAC-SHA256 over SigningString.
func Sign(it *Item, key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(SigningString(it)))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// SetSignature signs it in place (the simulator's, and tests').
func SetSignature(it *Item, key []byte) {
	if it.AdditionalData == nil {
		it.AdditionalData = make(map[string]string)
	}
	it.AdditionalData[SignatureField] = Sign(it, key)
}

// Verify reports whether it carries its signature under key, compared in
// constant time. A missing signature does not verify.
func Verify(it *Item, key []byte) bool {
	got, err := base64.StdEncoding.DecodeString(it.AdditionalData[SignatureField])
	if err != nil || len(got) == 0 {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(SigningString(it)))
	return hmac.Equal(got, m.Sum(nil))
}

// Notification is one accepted item as a store keeps it (a line of the
// receiver's file, a row of its table): the item as Adyen sent it, its
// signature included, so that every reader verifies it again, and when it
// was first received.
type Notification struct {
	V        int       `json:"v"`
	Received time.Time `json:"received"`
	Live     bool      `json:"live"`
	Item     Item      `json:"item"`
}

// Version is the version of Notification this build writes.
const Version = 1

// DedupKey is what makes two notifications one: Adyen retries a
// notification until it is answered [accepted], with the same event code,
// pspReference and success.
func DedupKey(it *Item) string {
	return it.EventCode + ":" + it.PSPReference + ":" + it.Success
}
