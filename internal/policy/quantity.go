package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// maxQuantityExponent bounds the decimal exponent of a quantity written as
// 1e3. Nothing evictiond reads is larger than 8Ei (about 9.2e18) or finer
// than a byte, so 64 either way leaves room for any mantissa and rejects
// nothing a user would mean.
const maxQuantityExponent = 64

// ParseQuantity is resource.ParseQuantity for values a user or a ConfigMap
// supplies. apimachinery narrows a decimal exponent to int32 and then rounds
// with 10^scale as a big.Int, so "1E000040000000000000000" does not fail: it
// spins for minutes and grows the heap (kubernetes/kubernetes#141203 fixes
// part of this upstream, #141306 the negative side). A config reload must
// never hang the agent, so an exponent beyond ±64 is refused here, before
// apimachinery sees it.
func ParseQuantity(s string) (resource.Quantity, error) {
	if exp, ok := decimalExponent(s); ok {
		e, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || e > maxQuantityExponent || e < -maxQuantityExponent {
			return resource.Quantity{}, &ExponentRangeError{Value: s, Exponent: exp}
		}
	}
	return resource.ParseQuantity(s)
}

// ExponentRangeError is a quantity whose decimal exponent ParseQuantity
// refuses. Its Rule is the text a field error carries.
type ExponentRangeError struct{ Value, Exponent string }

// Rule is the rule the value breaks, for a field error.
func (e *ExponentRangeError) Rule() string {
	return fmt.Sprintf("the exponent of a quantity must be within ±%d (8Ei is the largest quantity evictiond reads)", maxQuantityExponent)
}

func (e *ExponentRangeError) Error() string {
	return fmt.Sprintf("quantity %q: exponent %s: %s", e.Value, e.Exponent, e.Rule())
}

// QuantityRule is the rule a field error carries for a value ParseQuantity
// refused: the exponent's range when that is what failed, else the forms.
func QuantityRule(err error, forms string) string {
	var r *ExponentRangeError
	if errors.As(err, &r) {
		return r.Rule()
	}
	return forms
}

// decimalExponent returns the signed exponent digits of a quantity in
// exponent form (the "-3" of "5e-3"), and false for any other form,
// including the exa suffixes E and Ei.
func decimalExponent(s string) (string, bool) {
	s = strings.TrimLeft(s, "+-")
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 || (s[i] != 'e' && s[i] != 'E') {
		return "", false
	}
	exp := s[i+1:]
	digits := strings.TrimLeft(exp, "+-")
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return "", false
	}
	return exp, true
}
