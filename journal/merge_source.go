package journal

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"unsafe"

	"github.com/refundkit/refundkit/journal/arena"
)

type mergeRec struct {
	line      []byte // the line as read
	canonical bool   // line is what MarshalLine writes for the record
	lineNo    int
	key       tsKey
	rec       *Record   // sorted in memory: the record, valid until the source advances
	head      *lineHead // streamed: what the worker took of it
	data      []byte    // the block head's offsets point into
}

// record is the head's record, decoded again into scratch when streamed.
func (h *mergeRec) record(scratch *Record) (*Record, error) {
	if h.rec != nil {
		return h.rec, nil
	}
	if err := decodeLine(h.line, unsafe.String(unsafe.SliceData(h.line), len(h.line)), scratch); err != nil {
		return nil, err // cannot happen: the line decoded before
	}
	return scratch, nil
}

// outcome is the outcome h's record records, from rec if decoded.
func (h *mergeRec) outcome(rec *Record) (outcome, bool) {
	if rec != nil {
		return outcomeOf(rec)
	}
	hd := h.head
	if hd.outcome == 0 {
		return outcome{}, false
	}
	return outcome{final: hd.outcome == outcomeFailed, batch: headString(h.data, hd.batch), item: headString(h.data, hd.item), name: headString(h.data, hd.id),
		amount: hd.amount, currency: headString(h.data, hd.currency), done: hd.done, payment: headPayment(h.data, hd)}, true
}

// lineHead is what a merge reads of a record, taken on the parsing worker.
type lineHead struct {
	key     tsKey
	outcome uint8 // outcomeRefunded or outcomeFailed, else 0
	// far: an outcome's strings lie beyond 32-bit offsets: decoded again.
	far bool
	// Offsets and lengths in the block's data of the strings, when canonical.
	batch, item, id [2]int32
	currency        [2]int32
	amount          int64
	done            bool     // the refund's status says the money moved
	payKind         byte     // the kind of payment named (paymentKey's first letter), 0 for none
	payment         [2]int32 // and its id
}

const (
	outcomeRefunded = 1 + iota
	outcomeFailed   // a final failure
)

// headOf is the head of r, decoded from data (canonical: r's strings are in data).
func headOf(r *Record, data []byte, canonical bool) lineHead {
	h := lineHead{key: keyOf(r.Time)}
	switch {
	case r.Type == TypeRefunded:
		h.outcome = outcomeRefunded
	case r.Type == TypeFailed && r.Final:
		h.outcome = outcomeFailed
	}
	if h.outcome != 0 && canonical {
		at := func(s string) [2]int32 {
			if s == "" {
				return [2]int32{}
			}
			at, ok := span32(int(uintptr(unsafe.Pointer(unsafe.StringData(s)))-uintptr(unsafe.Pointer(unsafe.SliceData(data)))), len(s))
			h.far = h.far || !ok
			return at
		}
		id := r.Refund
		if h.outcome == outcomeFailed {
			id = r.Code
		}
		h.batch, h.item, h.id = at(r.Batch), at(r.Item), at(id)
		if h.outcome == outcomeRefunded {
			h.currency, h.amount, h.done = at(r.Currency), r.Amount, Done(r.Status)
			// The field itself, not paymentKey's copy: at reads where it lies.
			for _, p := range [...]struct {
				kind byte
				id   string
			}{{'c', r.Charge}, {'i', r.PaymentIntent}, {'p', r.Capture}, {'a', r.PSPReference}} {
				if p.id != "" {
					h.payKind, h.payment = p.kind, at(p.id)
					break
				}
			}
		}
	}
	return h
}

// span32 is off and n in 32 bits; false if they do not fit (cannot happen).
func span32(off, n int) ([2]int32, bool) {
	if off < 0 || n < 0 || off > math.MaxInt32-n {
		return [2]int32{}, false
	}
	return [2]int32{int32(off), int32(n)}, true
}

func headString(data []byte, at [2]int32) string {
	if at[1] == 0 {
		return ""
	}
	return unsafe.String(&data[at[0]], int(at[1]))
}

// mergeSource yields one input's records in ts order: streamed, or
// sorted in memory for an input out of order.
type mergeSource struct {
	input int
	name  string
	f     *os.File
	head  mergeRec

	rd *Reader
	k  int

	sorted []sortedLine
	lines  arena.Arena
	spare  Record

	count int
	torn  *Torn

	// letGo, if set, runs before a streamed input lets its span's lines go.
	letGo func(*mergeSource)
}

// sortedLine is a line of an out-of-order input, in canonical form.
type sortedLine struct {
	key    tsKey
	line   arena.Ref
	lineNo int
}

// openSource opens an input; hashItem hashes a streamed input's items on
// the parsing worker.
func openSource(input int, path string, inOrder bool, hashItem func(string) uint64) (*mergeSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	// One worker an input: the merge reads several at once.
	s := &mergeSource{input: input, name: path, f: f}
	opts := ReadOptions{Workers: 1, InFlight: 3, heads: true}
	if inOrder {
		opts.ItemHash = hashItem
	}
	s.rd = NewReader(io.NewSectionReader(f, 0, info.Size()), path, opts)
	if inOrder {
		return s, nil
	}
	// Keep every line, sort; records are decoded again when served.
	var scratch []byte
	for {
		ok, err := s.stream()
		if err != nil {
			s.close()
			return nil, err
		}
		if !ok {
			break
		}
		line := s.head.line
		if !s.head.canonical {
			r, err := s.head.record(&s.spare)
			if err != nil {
				s.close()
				return nil, fmt.Errorf("%s:%d: %w", s.name, s.head.lineNo, err)
			}
			scratch, _ = MarshalLine(scratch[:0], r)
			line = scratch[:len(scratch)-1]
		}
		s.sorted = append(s.sorted, sortedLine{key: s.head.key, line: s.lines.Add(unsafe.String(unsafe.SliceData(line), len(line))), lineNo: s.head.lineNo})
	}
	slices.SortStableFunc(s.sorted, func(a, b sortedLine) int {
		switch {
		case a.key.less(b.key):
			return -1
		case b.key.less(a.key):
			return 1
		}
		return 0
	})
	s.count = 0
	return s, nil
}

func (s *mergeSource) close() {
	if s.rd != nil {
		s.rd.Close()
		s.rd = nil
	}
	s.f.Close()
}

func (s *mergeSource) headHash() (uint64, bool) {
	if hashes := s.rd.Hashes(); s.sorted == nil && hashes != nil {
		return hashes[s.k-1], true
	}
	return 0, false
}

// advance makes the next record the head; false at the end.
func (s *mergeSource) advance() (bool, error) {
	if s.sorted == nil {
		return s.stream()
	}
	if s.count == len(s.sorted) {
		return false, nil
	}
	l := s.sorted[s.count]
	s.count++
	line := s.lines.Get(l.line)
	if err := decodeLine(unsafe.Slice(unsafe.StringData(line), len(line)), line, &s.spare); err != nil {
		return false, fmt.Errorf("%s:%d: %w", s.name, l.lineNo, err) // cannot happen: it decoded before
	}
	s.head = mergeRec{rec: &s.spare, line: unsafe.Slice(unsafe.StringData(line), len(line)), canonical: true, lineNo: l.lineNo, key: l.key}
	return true, nil
}

func (s *mergeSource) stream() (bool, error) {
	for s.k >= s.rd.spanLen() {
		if s.letGo != nil {
			s.letGo(s)
		}
		if !s.rd.Next() {
			s.torn = s.rd.Torn()
			return false, s.rd.Err()
		}
		s.k = 0
	}
	b, k, i := s.rd.at(s.k)
	h := &b.heads[k]
	s.head = mergeRec{line: b.recordLine(i), canonical: b.canon[k] && !h.far, lineNo: b.firstLine + i, key: h.key, head: h, data: b.data}
	s.k++
	s.count++
	return true, nil
}

// headPayment is paymentKey of the record hd heads.
func headPayment(data []byte, hd *lineHead) string {
	if hd.payKind == 0 {
		return ""
	}
	return string(hd.payKind) + ":" + headString(data, hd.payment)
}
