package rehydrate

import (
	"fmt"
	"unicode/utf8"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

// NamespaceSeparator joins a namespace tool's name and the name of a function tool inside it into
// the flat function name vLLM is sent: vLLM's own flattening of namespace tools
// (vllm/tool_parsers/utils.py, _NAMESPACE_TOOL_SEPARATOR and flat_namespace_tool_name), so a
// request respgate forwards and one sent to vLLM directly name the tool the same way.
const NamespaceSeparator = "__"

// CodeToolNameConflict: two tools would reach vLLM under one function name.
const CodeToolNameConflict = "tool_name_conflict"

// tools writes the vLLM-bound "tools" member (when any tool is kept). The tool policy:
//
//   - function tools pass verbatim;
//   - a namespace tool ({"type":"namespace","name":"ns","tools":[function tools…]}, sent by
//     Codex CLI) is flattened: each function tool inside it is sent as a function tool named
//     "ns__<name>", every other member verbatim, and recorded in Result.ToolNames so the calls
//     can be mapped back; non-function tools inside it are dropped like top-level ones;
//   - every other type (web_search, custom, file_search, mcp, tool_search, …: tools vLLM cannot
//     serve) is left out and named once in Result.DroppedTools; the server applies the
//     configured policy (drop with a warning header, or reject with 400).
//
// Two tools that would reach vLLM under one name are a 400: the call could not be mapped back.
// The tools' shapes (types, names, a namespace's tools) were checked by wire.DecodeCreateRequest.
func (bd *builder) tools(tools []wire.Tool, res *Result) error {
	tw := toolWriter{bd: bd, names: map[string]string{}}
	for k, t := range tools {
		switch t.Type {
		case "function":
			if err := tw.add(t.Name, fmt.Sprintf("'tools[%d]'", k)); err != nil {
				return err
			}
			bd.buf = appendRaw(bd.buf, t.JSON)
		case "namespace":
			for j, f := range t.Tools {
				if f.Type != "function" {
					res.dropTool(f.Type)
					continue
				}
				flat := t.Name + NamespaceSeparator + f.Name
				sub := fmt.Sprintf("tools[%d].tools[%d]", k, j)
				if err := tw.add(flat, "'"+sub+"'"); err != nil {
					return err
				}
				var err error
				if bd.buf, err = appendFlatFunction(bd.buf, f.JSON, flat); err != nil {
					return wire.Invalid(sub, CodeInvalidJSON, "Invalid JSON in '%s'.", sub)
				}
				if res.ToolNames == nil {
					res.ToolNames = map[string]wire.ToolName{}
				}
				res.ToolNames[flat] = wire.ToolName{Namespace: t.Name, Name: f.Name}
			}
		default:
			res.dropTool(t.Type)
		}
	}
	if tw.kept > 0 {
		bd.buf = append(bd.buf, ']')
	}
	return nil
}

// toolWriter opens the "tools" array at the first tool kept and refuses a second tool with a
// name already sent.
type toolWriter struct {
	bd    *builder
	kept  int
	names map[string]string // vLLM-bound name → where it came from (for conflicts)
}

func (tw *toolWriter) add(name, from string) error {
	if prev, dup := tw.names[name]; dup {
		return wire.Invalid("tools", CodeToolNameConflict,
			"%s and %s both reach the model as function '%s'; rename one of them.", prev, from, wire.Clip(name))
	}
	tw.names[name] = from
	if tw.kept == 0 {
		tw.bd.key("tools")
		tw.bd.buf = append(tw.bd.buf, '[')
	} else {
		tw.bd.buf = append(tw.bd.buf, ',')
	}
	tw.kept++
	return nil
}

// appendFlatFunction appends a function tool from inside a namespace tool under its flat name:
// type and name first, every other member verbatim and in order. It fails on an object nested
// deeper than the scanner allows (jsonscan.MaxDepth).
func appendFlatFunction(dst, b []byte, flat string) ([]byte, error) {
	dst = append(dst, `{"type":"function","name":`...)
	dst = wire.AppendString(dst, flat)
	o := jsonscan.NewObj(b, 0, 0)
	for {
		m, ok := o.Next()
		if !ok {
			break
		}
		if keyIs(b, m, "type") || keyIs(b, m, "name") {
			continue
		}
		dst = append(dst, ',')
		dst = appendStr(dst, b, m.Key)
		dst = append(dst, ':')
		dst = appendValue(dst, b, m.Val)
	}
	return append(dst, '}'), o.Err()
}

// appendRaw appends a member as sent: verbatim, unless it holds invalid UTF-8 (possible only when
// the caller did not check it, as the server does), which is re-encoded as appendValue does.
func appendRaw(dst, raw []byte) []byte {
	if utf8.Valid(raw) {
		return append(dst, raw...)
	}
	return appendValue(dst, raw, jsonscan.Span{S: 0, E: len(raw), F: jsonscan.BadUTF8})
}
