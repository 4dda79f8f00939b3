package engine

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// decodeJSON decodes a JSON document into a JSON value: nil, bool, string, int64 (for
// integers that fit), float64, []any or map[string]any. Empty input is null. It is the
// hot path of replay, hence a small parser of its own rather than encoding/json, which
// allocates a decoder and cannot give int64 without json.Number.
func decodeJSON(raw []byte) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	p := jsonParser{data: raw}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos != len(p.data) {
		return nil, p.errorf("trailing data after the JSON value")
	}
	return v, nil
}

// maxJSONDepth bounds the nesting of objects and arrays in decoded JSON values.
const maxJSONDepth = 1000

// MaxPayloadDepth bounds the nesting of objects and arrays in the JSON payloads taken from outside (inputs,
// events, activity results). It is well below what the decoder takes, so that a
// payload accepted stays decodable once it is wrapped in the messages, events and
// values that carry it.
const MaxPayloadDepth = 128

// CheckPayload reports why raw is not a JSON payload the engine takes as it is: not
// one JSON document, not valid UTF-8 (encoding/json would replace the bad bytes with
// U+FFFD, altering the payload), an escape of half a UTF-16 surrogate pair (same), or
// nested deeper than MaxPayloadDepth. Empty means null and is accepted.
func CheckPayload(raw []byte) error {
	if !utf8.Valid(raw) {
		off := 0
		for off < len(raw) {
			r, n := utf8.DecodeRune(raw[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return fmt.Errorf("invalid UTF-8 at offset %d", off)
	}
	if len(raw) == 0 {
		return nil
	}
	p := jsonParser{data: raw, maxDepth: MaxPayloadDepth, strict: true}
	if _, err := p.value(0); err != nil {
		return err
	}
	p.space()
	if p.pos != len(p.data) {
		return p.errorf("trailing data after the JSON value")
	}
	return nil
}

type jsonParser struct {
	data []byte
	pos  int
	// maxDepth, when set, bounds the nesting below maxJSONDepth.
	maxDepth int
	// strict refuses escapes of half a surrogate pair.
	strict bool
}

func (p *jsonParser) errorf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *jsonParser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (any, error) {
	p.space()
	if p.pos >= len(p.data) {
		return nil, p.errorf("unexpected end")
	}
	switch c := p.data[p.pos]; {
	case c == '{' || c == '[':
		// depth counts the objects and arrays around this one.
		if max := cmp.Or(p.maxDepth, maxJSONDepth); depth >= max {
			return nil, p.errorf("nested more than %d levels", max)
		}
		if c == '{' {
			return p.object(depth)
		}
		return p.array(depth)
	case c == '"':
		return p.string()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	default:
		return nil, p.errorf("unexpected character %q", c)
	}
}

func (p *jsonParser) literal(word string) error {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return p.errorf("expected %s", word)
	}
	p.pos += len(word)
	return nil
}

func (p *jsonParser) object(depth int) (any, error) {
	p.pos++ // {
	obj := map[string]any{}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return obj, nil
	}
	for {
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.errorf("expected an object key")
		}
		key, err := p.string()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errorf("expected ':'")
		}
		p.pos++
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		obj[key] = v
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return obj, nil
		default:
			return nil, p.errorf("expected ',' or '}'")
		}
	}
}

func (p *jsonParser) array(depth int) (any, error) {
	p.pos++ // [
	list := []any{}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return list, nil
	}
	for {
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return list, nil
		default:
			return nil, p.errorf("expected ',' or ']'")
		}
	}
}

// string reads a string token. Plain ASCII strings are sliced directly; strings with
// escapes or other bytes go through encoding/json, which handles escapes and invalid
// UTF-8 the standard way.
func (p *jsonParser) string() (string, error) {
	start := p.pos
	p.pos++ // opening quote
	plain := true
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			if plain {
				return string(p.data[start+1 : p.pos-1]), nil
			}
			if p.strict {
				if err := checkSurrogates(p.data[start+1 : p.pos-1]); err != nil {
					return "", p.errorf("%v", err)
				}
			}
			var s string
			if err := json.Unmarshal(p.data[start:p.pos], &s); err != nil {
				return "", p.errorf("bad string: %v", err)
			}
			return s, nil
		case c == '\\':
			plain = false
			p.pos += 2
		case c < 0x20:
			return "", p.errorf("control character in string")
		default:
			if c >= 0x80 {
				plain = false
			}
			p.pos++
		}
	}
	return "", p.errorf("unterminated string")
}

// checkSurrogates reports a \u escape in the body of a JSON string that is half of a
// UTF-16 surrogate pair without the other half.
func checkSurrogates(s []byte) error {
	hex := func(i int) (rune, bool) {
		if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(s[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		r, ok := hex(i)
		if !ok {
			i++ // a two-byte escape
			continue
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if low, ok := hex(i + 6); !ok || low < 0xDC00 || low > 0xDFFF {
				return fmt.Errorf("\\u%04x is half of a surrogate pair", r)
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("\\u%04x is half of a surrogate pair", r)
		default:
			i += 5
		}
	}
	return nil
}

var errJSONNumber = errors.New("bad number")

// number reads a number with the JSON grammar; integers that fit are int64.
func (p *jsonParser) number() (any, error) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.data[p.pos] == '-' {
		p.pos++
	}
	integer := true
	if p.pos < len(p.data) && p.data[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return nil, p.errorf("%v", errJSONNumber)
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		integer = false
		p.pos++
		if digits() == 0 {
			return nil, p.errorf("%v", errJSONNumber)
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		integer = false
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.errorf("%v", errJSONNumber)
		}
	}
	text := p.data[start:p.pos]
	if integer {
		if i, ok := parseInt(text); ok {
			return i, nil
		}
	}
	// The conversion does not escape, so short numbers are converted on the stack.
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return nil, p.errorf("number %s out of range", text)
	}
	return f, nil
}

// parseInt parses the text of a JSON integer (an optional minus sign and digits) into
// an int64, reporting false when it does not fit.
func parseInt(text []byte) (int64, bool) {
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	if len(text) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range text {
		n = n*10 + uint64(c-'0') // 19 digits cannot overflow a uint64
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}
