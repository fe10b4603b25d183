package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"testing"
)

// TestSignVerify: the signature is base64 HMAC-SHA256, under the
// hex-decoded key, of the eight fields Adyen names, colon-joined; any
// field changed, or another key, or no signature, does not verify.
func TestSignVerify(t *testing.T) {
	key, err := ParseHMACKey("44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056")
	if err != nil {
		t.Fatal(err)
	}
	it := Item{PSPReference: "7914073381342284", OriginalReference: "", MerchantAccountCode: "TestMerchant",
		MerchantReference: "TestPayment-1407325143704", Amount: Amount{Currency: "EUR", Value: 1130}, EventCode: "AUTHORISATION", Success: "true"}
	if got, want := SigningString(&it), "7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"; got != want {
		t.Fatalf("signing string %q, want %q", got, want)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(SigningString(&it)))
	if Sign(&it, key) != base64.StdEncoding.EncodeToString(m.Sum(nil)) {
		t.Fatal("Sign is not base64(HMAC-SHA256(key, signing string))")
	}
	if Verify(&it, key) {
		t.Fatal("an item without a signature verified")
	}
	SetSignature(&it, key)
	if !Verify(&it, key) {
		t.Fatal("a signed item did not verify")
	}
	other, _ := ParseHMACKey("00" + "782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056")
	if Verify(&it, other) {
		t.Fatal("verified under another key")
	}
	for name, alter := range map[string]func(*Item){
		"amount":   func(x *Item) { x.Amount.Value++ },
		"currency": func(x *Item) { x.Amount.Currency = "USD" },
		"success":  func(x *Item) { x.Success = "false" },
		"event":    func(x *Item) { x.EventCode = "REFUND" },
		"psp":      func(x *Item) { x.PSPReference = "7914073381342285" },
		"original": func(x *Item) { x.OriginalReference = "X" },
		"merchant": func(x *Item) { x.MerchantAccountCode = "Other" },
		"ref":      func(x *Item) { x.MerchantReference = "refundkit:B:i:1" },
		"garbage":  func(x *Item) { x.AdditionalData[SignatureField] = "not base64!" },
	} {
		x := it
		x.AdditionalData = map[string]string{SignatureField: it.AdditionalData[SignatureField]}
		alter(&x)
		if Verify(&x, key) {
			t.Errorf("%s altered: still verifies", name)
		}
	}
	if _, err := ParseHMACKey("not hex"); err == nil {
		t.Error("a key that is not hex was taken")
	}
}

func TestKeyFitsAndDiffers(t *testing.T) {
	long := string(make([]byte, 128))
	k := Key("batch-with-a-long-name-0123456789012345678901234567890123456789", long, 1000)
	if len(k) > MaxKey {
		t.Fatalf("key of %d characters", len(k))
	}
	if Key("B", "i", 1) == Key("B", "i", 2) || Key("B", "i", 1) == Key("B2", "i", 1) {
		t.Fatal("keys of different attempts or batches are equal")
	}
}

// TestKeysWhileRotated: ADYEN_HMAC_KEY may hold two keys, comma-separated;
// an item verifies under either, not under a third, and never under an
// empty key (anyone can sign under it).
func TestKeysWhileRotated(t *testing.T) {
	keys, err := ParseHMACKeys("44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056, 00782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056")
	if err != nil || len(keys) != 2 {
		t.Fatalf("ParseHMACKeys: %d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", "ab,", ",ab", "ab,not hex"} {
		if _, err := ParseHMACKeys(bad); err == nil {
			t.Errorf("ParseHMACKeys(%q): nil error", bad)
		}
	}
	it := Item{PSPReference: "P", EventCode: EventRefund, Success: "true"}
	for i, k := range keys {
		SetSignature(&it, k)
		if !Verify(&it, keys...) {
			t.Errorf("signed under key %d: does not verify under both", i)
		}
	}
	SetSignature(&it, []byte("a third key"))
	if Verify(&it, keys...) {
		t.Error("signed under a third key: verifies")
	}
	SetSignature(&it, nil)
	if Verify(&it, nil) || Verify(&it, keys[0], []byte{}) || !NoKey([][]byte{keys[0], nil}) || !NoKey(nil) || NoKey(keys) {
		t.Error("an empty key verifies, or NoKey misses it")
	}
}
