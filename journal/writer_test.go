package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)

func intent(batch, item string, attempt int) *Record {
	return &Record{V: Version, Type: TypeIntent, Time: t0.Add(time.Duration(attempt) * time.Second), Batch: batch, Item: item,
		Charge: "ch_" + item, Attempt: attempt, Key: fmt.Sprintf("refundkit:%s:%s:%d", batch, item, attempt), Amount: 500}
}

func refunded(batch, item string) *Record {
	return &Record{V: Version, Type: TypeRefunded, Time: t0.Add(time.Minute), Batch: batch, Item: item,
		Attempt: 1, Refund: "re_" + item, Amount: 500, Currency: "eur", Status: "succeeded", Source: SourceAPI}
}

func failed(batch, item string, attempt, status int, final bool) *Record {
	return &Record{V: Version, Type: TypeFailed, Time: t0.Add(time.Minute), Batch: batch, Item: item,
		Attempt: attempt, HTTPStatus: status, Code: "card_declined", Message: `the "card" was declined`, Final: final}
}

func TestOpenAppendReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, st, torn, err := Open(path, Options{})
	if err != nil || torn != nil || st.Len() != 0 {
		t.Fatalf("Open new: %v, %v, len %d", err, torn, st.Len())
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("journal mode: %v %v", info.Mode(), err)
	}
	if err := w.Append(intent("b", "i1", 1), refunded("b", "i1"), intent("b", "i2", 1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(failed("b", "i2", 1, 402, true)); err != nil {
		t.Fatal(err)
	}
	if got := w.Stats(); got.Appends != 2 || got.Records != 4 || got.Fsyncs != 2 {
		t.Errorf("Stats = %+v", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(intent("b", "i3", 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	w, st, torn, err = Open(path, Options{})
	if err != nil || torn != nil {
		t.Fatalf("reopen: %v %v", err, torn)
	}
	defer w.Close()
	if s, _ := st.Lookup("b", "i1"); s.Status != StatusRefunded || s.Refund != "re_i1" {
		t.Errorf("i1 = %+v", s)
	}
	if s, _ := st.Lookup("b", "i2"); s.Status != StatusFailed || s.Code != "card_declined" {
		t.Errorf("i2 = %+v", s)
	}
}

func TestOpenLockedInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, _, _, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, err = Open(path, Options{})
	var locked *LockedError
	if !errors.As(err, &locked) || locked.Path != path {
		t.Fatalf("second Open = %v, want *LockedError", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, _, _, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	w.Close()
}
