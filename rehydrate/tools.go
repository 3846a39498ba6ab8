package rehydrate

import (
	"fmt"

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
func (bd *builder) tools(raw []byte, sp span, res *Result, key func(string)) error {
	if sp.Kind(raw) != '[' {
		return wire.Invalid("tools", CodeInvalidType, "Invalid type for 'tools': expected an array.")
	}
	kept := 0
	names := map[string]string{} // vLLM-bound name → where it came from (for conflicts)
	add := func(name, from string) error {
		if prev, dup := names[name]; dup {
			return wire.Invalid("tools", CodeToolNameConflict,
				"%s and %s both reach the model as function '%s'; rename one of them.", prev, from, clip(name))
		}
		names[name] = from
		if kept == 0 {
			key("tools")
			bd.buf = append(bd.buf, '[')
		} else {
			bd.buf = append(bd.buf, ',')
		}
		kept++
		return nil
	}
	it := newArrIter(raw, sp)
	for k := 0; ; k++ {
		ts, ok := it.Next()
		if !ok {
			break
		}
		param := fmt.Sprintf("tools[%d]", k)
		typ, isObj := toolType(raw, ts)
		if !isObj {
			return wire.Invalid(param, CodeInvalidType, "Invalid type for '%s': expected an object.", param)
		}
		switch typ {
		case "function":
			name, _ := objMember(raw, ts, "name")
			if err := add(name, "'"+param+"'"); err != nil {
				return err
			}
			bd.buf = appendValue(bd.buf, raw, ts)
		case "namespace":
			ns, nsp := objMember(raw, ts, "name")
			if !nsp.IsStr(raw) || ns == "" {
				return wire.Invalid(param+".name", CodeMissingParameter, "A namespace tool ('%s') needs a non-empty string 'name'.", param)
			}
			_, inner := objMember(raw, ts, "tools")
			if inner.Kind(raw) != '[' {
				return wire.Invalid(param+".tools", CodeInvalidType, "Invalid type for '%s.tools': expected an array of tools.", param)
			}
			jt := newArrIter(raw, inner)
			for j := 0; ; j++ {
				fs, ok := jt.Next()
				if !ok {
					break
				}
				sub := fmt.Sprintf("%s.tools[%d]", param, j)
				ftyp, isObj := toolType(raw, fs)
				if !isObj {
					return wire.Invalid(sub, CodeInvalidType, "Invalid type for '%s': expected an object.", sub)
				}
				if ftyp != "function" {
					res.dropTool(ftyp)
					continue
				}
				name, namesp := objMember(raw, fs, "name")
				if !namesp.IsStr(raw) || name == "" {
					return wire.Invalid(sub+".name", CodeMissingParameter, "The function tool '%s' needs a non-empty string 'name'.", sub)
				}
				flat := ns + NamespaceSeparator + name
				if err := add(flat, "'"+sub+"'"); err != nil {
					return err
				}
				bd.buf = appendFlatFunction(bd.buf, raw, fs, flat)
				if res.ToolNames == nil {
					res.ToolNames = map[string]wire.ToolName{}
				}
				res.ToolNames[flat] = wire.ToolName{Namespace: ns, Name: name}
			}
		default:
			res.dropTool(typ)
		}
	}
	if kept > 0 {
		bd.buf = append(bd.buf, ']')
	}
	return nil
}

// toolChoiceFunction writes a forced-function tool_choice that names a namespaced tool
// ({"type":"function","name":"n","namespace":"ns"}) with the flat name, and reports whether it
// did; any other function tool_choice is forwarded verbatim by the caller.
func (bd *builder) toolChoiceFunction(raw []byte, sp span, key func(string)) bool {
	ns, nsp := objMember(raw, sp, "namespace")
	name, namesp := objMember(raw, sp, "name")
	if !nsp.IsStr(raw) || ns == "" || !namesp.IsStr(raw) {
		return false
	}
	key("tool_choice")
	bd.buf = append(bd.buf, `{"type":"function","name":`...)
	bd.buf = appendQuoted(bd.buf, ns+NamespaceSeparator+name)
	bd.buf = append(bd.buf, '}')
	return true
}

// objMember returns the string value (when it is one) and the span of an object's member; the span
// is zero when the member is absent.
func objMember(b []byte, obj span, name string) (string, span) {
	o := newObjIter(b, obj.S)
	var found span
	for {
		m, ok := o.Next()
		if !ok {
			break
		}
		if keyIs(b, m, name) {
			found = m.Val
		}
	}
	if found.IsStr(b) {
		return str(b, found), found
	}
	return "", found
}

// appendFlatFunction appends a function tool from inside a namespace tool under its flat name:
// type and name first, every other member verbatim and in order.
func appendFlatFunction(dst, b []byte, fs span, flat string) []byte {
	dst = append(dst, `{"type":"function","name":`...)
	dst = appendQuoted(dst, flat)
	o := newObjIter(b, fs.S)
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
	return append(dst, '}')
}
