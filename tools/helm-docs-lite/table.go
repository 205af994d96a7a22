package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Markers around the generated table in the README.
const (
	beginMarker = "<!-- values-table:begin -->"
	endMarker   = "<!-- values-table:end -->"
)

// Row is one line of the table: a key's dotted path, its default (a YAML flow value, "" for a
// section) and the comment above it.
type Row struct {
	Key, Default, Description string
}

// Rows walks values.yaml: a block mapping with keys is a section (a row when it has a
// comment) whose keys are walked; anything else (scalars, sequences, flow or empty mappings)
// is a value with its default.
func Rows(values []byte) ([]Row, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml is not one mapping")
	}
	var rows []Row
	var walk func(prefix string, m *yaml.Node) error
	walk = func(prefix string, m *yaml.Node) error {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := prefix + k.Value
			desc := comment(k.HeadComment)
			if v.Kind == yaml.MappingNode && v.Style&yaml.FlowStyle == 0 && len(v.Content) > 0 {
				if desc != "" {
					rows = append(rows, Row{Key: key, Description: desc})
				}
				if err := walk(key+".", v); err != nil {
					return err
				}
				continue
			}
			def, err := flow(v)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			rows = append(rows, Row{Key: key, Default: def, Description: desc})
		}
		return nil
	}
	if err := walk("", doc.Content[0]); err != nil {
		return nil, err
	}
	return rows, nil
}

// comment is a head comment as one line: "#" markers dropped, lines joined; a blank comment
// line ends a paragraph that belongs to something above (the file's header), so only the
// last paragraph is the key's.
func comment(head string) string {
	paras := strings.Split(strings.TrimSpace(head), "\n\n")
	last := paras[len(paras)-1]
	var words []string
	for _, l := range strings.Split(last, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
		if l != "" {
			words = append(words, l)
		}
	}
	return strings.Join(words, " ")
}

// flow is v as a one-line YAML flow value, without comments.
func flow(v *yaml.Node) (string, error) {
	c := strip(v)
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// strip is a copy of n in flow style without comments.
func strip(n *yaml.Node) *yaml.Node {
	c := *n
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	if c.Kind == yaml.MappingNode || c.Kind == yaml.SequenceNode {
		c.Style |= yaml.FlowStyle
	}
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, ch := range n.Content {
		c.Content[i] = strip(ch)
	}
	return &c
}

// Table renders rows as the README's markdown table.
func Table(values []byte) (string, error) {
	rows, err := Rows(values)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| key | default | description |\n| --- | --- | --- |\n")
	for _, r := range rows {
		def := ""
		if r.Default != "" {
			def = "`" + cell(r.Default) + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.Key, def, cell(r.Description))
	}
	return b.String(), nil
}

// cell escapes what would end a markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Splice replaces what lies between the README's markers with table.
func Splice(readme []byte, table string) ([]byte, error) {
	before, rest, ok := bytes.Cut(readme, []byte(beginMarker+"\n"))
	if !ok {
		return nil, fmt.Errorf("no line %q", beginMarker)
	}
	_, after, ok := bytes.Cut(rest, []byte(endMarker))
	if !ok {
		return nil, fmt.Errorf("no line %q after %q", endMarker, beginMarker)
	}
	var out bytes.Buffer
	out.Write(before)
	out.WriteString(beginMarker + "\n")
	out.WriteString(table)
	out.WriteString(endMarker)
	out.Write(after)
	return out.Bytes(), nil
}
