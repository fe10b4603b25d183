package crashrig

import (
	"strconv"
	"strings"
)

// ParseKey splits an idempotency key refundkit made (refund.IdempotencyKey:
// refundkit:<batch>:<item>:<attempt>) into its batch, item and attempt: a
// batch has no colon, an item may.
func ParseKey(key string) (batch, item, attempt string, ok bool) {
	rest, ok := strings.CutPrefix(key, "refundkit:")
	if !ok {
		return "", "", "", false
	}
	batch, rest, ok = strings.Cut(rest, ":")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i < 0 {
		return "", "", "", false
	}
	if n, err := strconv.Atoi(rest[i+1:]); err != nil || n < 1 {
		return "", "", "", false
	}
	return batch, rest[:i], rest[i+1:], true
}
