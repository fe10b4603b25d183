package journal

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"runtime"
	"sync"
	"time"
)

type tsKey struct {
	sec  int64
	nsec int
}

func keyOf(t time.Time) tsKey { return tsKey{t.Unix(), t.Nanosecond()} }

func (a tsKey) less(b tsKey) bool { return a.sec < b.sec || (a.sec == b.sec && a.nsec < b.nsec) }

// checkOrder reports per input whether the records a Reader keeps are in
// ts order, reading only timestamps, on all cores.
func checkOrder(paths []string) ([]bool, error) {
	inOrder := make([]bool, len(paths))
	errs := make([]error, len(paths))
	next := make(chan int, len(paths))
	for i := range paths {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(len(paths), runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := range next {
				inOrder[i], errs[i] = inTSOrder(paths[i])
			}
		})
	}
	wg.Wait()
	return inOrder, errors.Join(errs...)
}

// inTSOrder: a step back counts only if the Reader keeps it (not in a
// torn tail).
func inTSOrder(path string) (bool, error) {
	back, err := firstStepBack(path)
	if err != nil {
		return false, err
	}
	if back == 0 {
		return true, nil
	}
	kept, err := keepsLine(path, back)
	return !kept, err
}

// keepsLine reports whether a Reader hands on the record at line n.
func keepsLine(path string, n int) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return false, err
	}
	rd := NewReader(io.NewSectionReader(f, 0, info.Size()), path, ReadOptions{Workers: 1, heads: true})
	defer rd.Close()
	for rd.Next() {
		if rd.Line(rd.spanLen()-1) >= n {
			return true, nil
		}
	}
	return false, nil // the end of what is kept: a torn tail, or an error the merge reports
}

// firstStepBack is the line of the first record stamped before the one
// above it, reading only timestamps; 0 if none, or at a line it cannot read.
func firstStepBack(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var (
		prev     tsKey
		prevZ    []byte // the previous ts when in UTC form, compared as text
		havePrev bool
		r        Record
		long     []byte
		n        int // lines read
	)
	for {
		n++
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long[:0], line...)
			for err == bufio.ErrBufferFull && len(long) <= maxLine {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			return 0, nil // the end, a torn tail or an overlong line: the merge judges
		}
		line = line[:len(line)-1]
		if _, _, isCommit, _ := parseCommit(line); isCommit {
			continue // framing: no ts
		}
		ts := quickTS(line)
		if prevZ != nil && isUTCForm(ts) {
			if lessUTCForm(ts, prevZ) {
				return n, nil
			}
			prevZ = append(prevZ[:0], ts...)
			continue
		}
		t, ok, _ := parseTime(string(ts))
		if !ok {
			if decodeLine(line, string(line), &r) != nil {
				return 0, nil
			}
			t = r.Time
		}
		if prevZ != nil {
			p, _, _ := parseTime(string(prevZ))
			prev, prevZ = keyOf(p), nil
		}
		k := keyOf(t)
		if havePrev && k.less(prev) {
			return n, nil
		}
		prev, havePrev = k, true
		if ok && isUTCForm(ts) {
			prevZ = append(prevZ[:0], ts...)
		}
	}
}

// quickTS finds a line's ts without decoding it: where MarshalLine puts
// it, else after the first "ts":" (a quote in a string is escaped). Nil if none.
func quickTS(line []byte) []byte {
	const head = `{"v":1,"type":"`
	i := -1
	if len(line) > len(head) && string(line[:len(head)]) == head {
		if q := bytes.IndexByte(line[len(head):], '"'); q >= 0 {
			if at := len(head) + q; bytes.HasPrefix(line[at:], []byte(`","ts":"`)) {
				i = at + len(`","ts":"`)
			}
		}
	}
	if i < 0 {
		if i = bytes.Index(line, []byte(`"ts":"`)); i < 0 {
			return nil
		}
		i += len(`"ts":"`)
	}
	j := bytes.IndexByte(line[i:], '"')
	if j < 0 {
		return nil
	}
	return line[i : i+j]
}

// isUTCForm: ts is 2006-01-02T15:04:05[.9*]Z, ordered as text (lessUTCForm).
func isUTCForm(ts []byte) bool {
	n := len(ts)
	if n < 20 || n > 30 || ts[n-1] != 'Z' || (n > 20 && (ts[19] != '.' || n == 21)) {
		return false
	}
	for i, c := range ts[:n-1] {
		switch i {
		case 4, 7:
			if c != '-' {
				return false
			}
		case 10:
			if c != 'T' {
				return false
			}
		case 13, 16:
			if c != ':' {
				return false
			}
		case 19:
		default:
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// lessUTCForm compares date and time as text, the fractions padded with zeros.
func lessUTCForm(a, b []byte) bool {
	if c := bytes.Compare(a[:19], b[:19]); c != 0 {
		return c < 0
	}
	fa, fb := a[19:len(a)-1], b[19:len(b)-1] // "" or ".ddd"
	for i := 1; i < 10; i++ {
		da, db := byte('0'), byte('0')
		if i < len(fa) {
			da = fa[i]
		}
		if i < len(fb) {
			db = fb[i]
		}
		if da != db {
			return da < db
		}
	}
	return false
}
