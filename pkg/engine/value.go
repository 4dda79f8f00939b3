package engine

import (
	"fmt"
	"strings"

	"cel.dev/cel-go/interpreter"
)

// Value is a JSON value written in a definition. Strings in it may hold ${ ... }
// expressions: a string that is exactly one expression takes the expression's value, of
// any type; a string mixing text and expressions is rendered as a string.
type Value struct {
	source any
	t      *template
}

// Source returns the value as written in the definition.
func (v Value) Source() any { return v.source }

// IsConstant reports whether the value holds no expression.
func (v Value) IsConstant() bool { return v.t == nil || v.t.constant }

// template is the compiled form of a Value.
type template struct {
	constant bool
	value    any          // constant value
	expr     *expression  // whole-string expression
	parts    []segment    // text mixed with expressions
	list     []*template  // array
	keys     []string     // object keys, sorted
	fields   []*template  // object values, in keys order
	kind     templateKind // which of the above
	path     string       // where the value is in the definition
}

type templateKind uint8

const (
	constantTemplate templateKind = iota
	exprTemplate
	stringTemplate
	listTemplate
	objectTemplate
)

type segment struct {
	text string
	expr *expression
}

// render evaluates the template against the names of s, spending the size of what it
// builds from m.
func (t *template) render(s interpreter.Activation, m *meter) (any, error) {
	if t == nil {
		return nil, m.spend(4)
	}
	switch t.kind {
	case constantTemplate:
		if err := measure(t.value, m); err != nil {
			return nil, fmt.Errorf("%s: %w", t.path, err)
		}
		return t.value, nil
	case exprTemplate:
		v, err := t.expr.evaluate(s, m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.path, err)
		}
		return v, nil
	case stringTemplate:
		var b strings.Builder
		fail := func(err error) (any, error) { return nil, fmt.Errorf("%s: %w", t.path, err) }
		if err := m.spend(2); err != nil {
			return fail(err)
		}
		for _, p := range t.parts {
			if p.expr == nil {
				if err := m.spend(len(p.text)); err != nil {
					return fail(err)
				}
				b.WriteString(p.text)
				continue
			}
			// The part's value is measured as it is built; its text is no longer.
			v, err := p.expr.evaluate(s, m)
			if err != nil {
				return fail(err)
			}
			if str, ok := v.(string); ok {
				b.WriteString(str)
				continue
			}
			raw, err := encodeJSON(v)
			if err != nil {
				return fail(err)
			}
			b.Write(raw)
		}
		return b.String(), nil
	case listTemplate:
		if err := m.spend(2 + len(t.list)); err != nil {
			return nil, fmt.Errorf("%s: %w", t.path, err)
		}
		out := make([]any, len(t.list))
		for i, item := range t.list {
			v, err := item.render(s, m)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	default:
		if err := m.spend(2 + len(t.keys)); err != nil {
			return nil, fmt.Errorf("%s: %w", t.path, err)
		}
		out := make(map[string]any, len(t.keys))
		for i, k := range t.keys {
			if err := m.spend(len(k) + 3); err != nil {
				return nil, fmt.Errorf("%s: %w", t.path, err)
			}
			v, err := t.fields[i].render(s, m)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	}
}

// splitTemplate cuts s into text and ${ ... } expression sources. It understands CEL
// string literals and nested braces well enough to find the closing brace.
func splitTemplate(s string) (parts []string, isExpr []bool, err error) {
	rest := s
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			if rest != "" {
				parts, isExpr = append(parts, rest), append(isExpr, false)
			}
			return parts, isExpr, nil
		}
		if i > 0 {
			parts, isExpr = append(parts, rest[:i]), append(isExpr, false)
		}
		end, err := closingBrace(rest[i+2:])
		if err != nil {
			return nil, nil, err
		}
		src := strings.TrimSpace(rest[i+2 : i+2+end])
		if src == "" {
			return nil, nil, fmt.Errorf("empty expression ${}")
		}
		parts, isExpr = append(parts, src), append(isExpr, true)
		rest = rest[i+2+end+1:]
	}
}

// closingBrace returns the index in s of the brace that closes an expression.
func closingBrace(s string) (int, error) {
	depth := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if quote != 0 {
			switch c {
			case '\\':
				i++
			case quote:
				quote = 0
			}
			continue
		}
		switch c {
		case '\'', '"':
			quote = c
		case '{':
			depth++
		case '}':
			if depth == 0 {
				return i, nil
			}
			depth--
		}
	}
	return 0, fmt.Errorf("unterminated expression: ${ without a closing }")
}
