package cli

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
)

// fractionMapper reads a float flag given as a number or as a fraction:
// `--share 0.8/2` is 0.4, as the docs write a share split by hand.
type fractionMapper struct{}

func (fractionMapper) Decode(ctx *kong.DecodeContext, target reflect.Value) error {
	var s string
	if err := ctx.Scan.PopValueInto("value", &s); err != nil {
		return err
	}
	v, err := parseFraction(s)
	if err != nil {
		return err
	}
	target.SetFloat(v)
	return nil
}

// parseFraction is s as a number: "0.4", or "0.8/2" (a number over a
// positive one).
func parseFraction(s string) (float64, error) {
	num, den, split := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil {
		return 0, fmt.Errorf("%q: want a number or a fraction such as 0.8/2", s)
	}
	if !split {
		return n, nil
	}
	d, err := strconv.ParseFloat(strings.TrimSpace(den), 64)
	if err != nil || !(d > 0) {
		return 0, fmt.Errorf("%q: want a number or a fraction such as 0.8/2, over a number above 0", s)
	}
	return n / d, nil
}
