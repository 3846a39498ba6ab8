// Package vllmsim is a deterministic stand-in for vLLM's OpenAI Responses endpoint. respgate's tests,
// `make run` without a GPU and users' CI talk to it exactly as they would talk to vLLM: it speaks
// vLLM's real wire dialects, quirks included (docs/wire.md §6), can inject faults per request, and records
// every request it receives so a test can assert exactly what "vLLM" was sent.
//
// It owns the simulation only: it keeps no state between requests (like vLLM without
// VLLM_ENABLE_RESPONSES_API_STORE) and must not import anything from respgate but wire.
//
// # Routes
//
//	POST /v1/responses       JSON or SSE (stream:true), vLLM's dialect
//	GET  /v1/models          every served model, in vLLM's ModelCard shape
//	POST /tokenize           vLLM's TokenizeResponse (count, max_model_len, tokens); a token per word,
//	                         3 more per message, as the context-length check counts
//	GET  /v1/responses/{id}  always vLLM's 404 "Response with id '…' not found." (no store)
//	POST /v1/responses/{id}/cancel  likewise
//	GET  /sim/requests       the recorded request log as JSON (DELETE clears it); not recorded itself
//
// Anything else gets vLLM's error envelope with 404 (405 for a known path with the wrong method):
// {"error":{"message":"Not Found","type":"Not Found","param":null,"code":404}}. Errors always use
// vLLM's envelope with the HTTP status as an integer code (docs/wire.md §6.1;
// vllm/entrypoints/openai/engine/serving.py create_error_response): validation errors are 400
// "BadRequestError", an unknown model is 404 "NotFoundError", an unknown previous_response_id is 404
// "invalid_request_error" with param "response_id", a tool_choice other than auto/none on the harmony
// model is 501 "NotImplementedError", a missing input is 400 "Bad Request" with param "body.input", a
// prompt over MaxModelLen is 400 with the dialect's wording ("This model's maximum context length is
// N tokens. However, your request has M input tokens…" from the parser path's renderer, param
// "input_tokens"; "The engine prompt length M exceeds the max_model_len N…" from harmony, param
// "input").
// A POST /v1/responses without Content-Type application/json is refused with 400 before anything
// else, as vLLM's validate_json_request does. Unknown top-level request fields are accepted and
// ignored, and `store` is ignored.
//
// # Models and dialects
//
// The dialect is chosen by the model name (Options.Models; by default both of these are served):
//
//	openai/gpt-oss-sim   Harmony: gpt-oss through vLLM's harmony path
//	Qwen/Qwen3-sim       ReasoningParser: a chat-template model with a reasoning parser and a
//	                     tool-call parser (vLLM's "simple" streaming path)
//
// A missing model means the first served model, as in vLLM.
//
// # Fault injection
//
// Faults are chosen per request, without a restart, by a query string appended to the model name, so
// they pass through a gateway that forwards the model:
//
//	"model": "openai/gpt-oss-sim?delay_ms=20&cut_after=5"
//
// or by an X-Sim-Fault header with the same syntax (a leading "?" is optional). Options.Fault applies to
// every request; the model name's query overrides it and the header overrides both, key by key. The
// model echoed in responses is always the base name. Keys:
//
//	delay_ms=N           pace delta events (reasoning, text and argument deltas) N ms apart, by
//	                     deadline so that write time does not accumulate; non-streaming requests
//	                     sleep N ms per output token before answering
//	stall=D              stall for D (a Go duration, or a bare number of seconds) ...
//	stall_after=K        ... after K events have been written (default 0: before the first event, but
//	                     after the 200 headers were flushed)
//	cut_after=N          close the connection after N events (no terminal event; vLLM's behaviour on a
//	                     mid-stream error, docs/wire.md §6.5 quirk 5); a malformed= frame counts as one
//	cut_inside=N         write N events, then the first half of the next frame, then close
//	error_after=N        after N events, write the frame vLLM's streaming routes write for a
//	                     generation error, data: {"error":{"message":"Internal server error",
//	                     "type":"InternalServerError","param":null,"code":500}} (no event name),
//	                     then close the connection as vLLM's Responses route does (it cannot
//	                     serialise that frame, docs/wire.md §6.5 quirk 5); not streamed: that 500
//	error=NAME           answer with one of vLLM's error answers, by name (ErrorNames; with
//	                     example values): json_invalid, media_type, input_missing, input_list,
//	                     input_item, field_type, no_call, unknown_input_type, encrypted_content,
//	                     max_tokens, unknown_model, response_not_found, tool_choice,
//	                     context_length (the dialect's wording), generation, route_not_found,
//	                     method_not_allowed, body_too_large
//	status=S             answer with HTTP status S in vLLM's error envelope, before anything else
//	retry_after=V        with status=S, send the header "Retry-After: V" (V as given, 1..64
//	                     printable ASCII: seconds, an HTTP-date, or garbage to test the reader);
//	                     what a rate-limiting proxy or an overloaded server in front of vLLM sends
//	max_output_tokens=N  stop after N output tokens (the request's max_output_tokens works the same;
//	                     the smaller one wins) → status "incomplete"
//	malformed=K          insert one frame whose data is invalid JSON after K events; the stream goes on
//	huge=N               make the answer's first delta event exactly N bytes of data (the delta is a run
//	                     of "x" inserted as the first token; it is part of the answer text everywhere)
//	tokens=N             make the answer text exactly N tokens long (filler words "w1 w2 …" pad it), for
//	                     benchmarks
//	input_tokens=N       report usage.input_tokens as N (the context-length check still counts the
//	                     real input), so a gateway's use of the reported usage can be tested
//	reasoning=0          produce no reasoning item
//	noargs=1             function calls get empty arguments ""
//	quirks=LIST          switch quirks for this request, see below
//
// Without streaming: cut_after closes the connection before any response byte, cut_inside sends the
// headers and half the body, malformed sends the first half of the body with status 200, and
// stall/delay delay the answer. Every fault parameter is validated; an unknown key is a 400.
//
// The connection is closed by panicking with http.ErrAbortHandler, so ServeHTTP must be run by an
// http.Server (httptest.NewServer is fine); an httptest.ResponseRecorder will see the panic.
//
// # Quirks
//
// Every vLLM quirk is on by default and can be switched off one by one, for all requests with
// Options.DisableQuirks or per request with quirks=LIST: a comma-separated list applied in order to the
// default set, where "name" adds a quirk, "-name" removes it, "none" clears all and "all" sets all
// (so quirks=none gives a clean stream, quirks=-ids,-content_index removes two). Names (docs/wire.md §6.5):
//
//	reasoning_part  reasoning parts are announced as response.reasoning_part.added/.done (vLLM-only
//	                event names) instead of response.content_part.added/.done
//	content_index   harmony: content_index is not reset between items (the message after reasoning
//	                has content_index 1)
//	ids             item ids in the stream differ from those in the final response; harmony streams
//	                use msg_ ids for reasoning and message, the parser path bare UUIDs; a function
//	                call's streamed call_id differs from the final one
//	added           harmony: output_item.added and content_part.added are missing for the message that
//	                follows reasoning and for any item without deltas (vLLM emits them lazily)
//	status          final output: reasoning items (both paths) and harmony function calls have
//	                status:null; every item is "completed", even the one cut by max_output_tokens
//	stray           stray fields: harmony function-call output_item.done items carry item_id,
//	                output_index and sequence_number:-1; parser-path message done items carry summary:[]
//	nulls           reasoning items carry content:null/encrypted_content:null; done output_text parts
//	                carry logprobs:null
//	terminal        response.completed is the terminal event even when the status is "incomplete"
//	truncate        harmony: no done events for the item cut by max_output_tokens
//	args_done       parser path: function_call_arguments.done only follows a non-empty delta
//	fields          the response object has vLLM's field set (no error, completed_at, store,
//	                presence_penalty…; top_logprobs null; max_output_tokens is the effective limit;
//	                usage carries vLLM's *_per_turn arrays and tool_output_tokens)
//
// With no quirks the stream is a strictly valid OpenAI stream: content_part events, per-item
// content_index from 0, one id per item everywhere, every item announced and closed (a cut item closes
// with status "incomplete"), response.incomplete for an incomplete response, OpenAI's response fields.
//
// What both modes share with vLLM: response.created (sequence_number 0) → response.in_progress → items →
// one terminal event; no response.failed; no "data: [DONE]"; reasoning only as raw reasoning_text
// content (never summaries); logprobs:[] on text deltas; frames "event: T\ndata: JSON\n\n", one write
// and one flush each; compact JSON with vLLM's (alphabetical) key order.
//
// # Input handling (docs/wire.md §6.4)
//
// input is required (a string is one user message). Reasoning items reach the model as plaintext: the
// harmony path joins every content[].text with "\n" and skips an item without content; the parser path
// uses content[0].text, else summary[0].text. The parser path rejects a reasoning item with a non-empty
// encrypted_content (400 "Encrypted content is not supported."); harmony ignores encrypted_content, as
// vLLM does. Harmony requires each function_call_output to follow its function_call in the same input
// (400 "No call message found for <call_id>") and rejects any other item type (400 "Unknown input type:
// X"); it drops empty system/developer messages. The parser path passes unknown item types through and
// ignores them.
//
// # Deterministic answers
//
// The output depends only on the input, so a test can tell what reached the model. Definitions: a
// message's text is its string content, or the text (or refusal) of its parts joined with "\n"; a quote
// is a text with its whitespace collapsed to single spaces, cut to its first 40 runes.
//
// Reasoning item (one, unless reasoning=0):
//
//	Thinking about "<quote of the last user text>". Prior reasoning: "<quote of the last reasoning text that reached the model>".
//
// with `Prior reasoning: none.` when no reasoning item reached the model.
//
// Answer text:
//
//	Seen <m> messages, <r> reasoning items, <t> tool outputs. Facts: <facts>.
//
// followed by ` Tool said: <out1>; <out2>.` when the input ends with function_call_output items: it
// echoes the outputs of every function_call_output after the last user message. m counts the message
// items that reached the model (any role), r the reasoning items that did, t every function_call_output.
// Facts: every occurrence of "remember:" (any case) in a user message contributes the rest of that line,
// trimmed of spaces and trailing dots; facts are joined with "; ", or "none".
//
// Function calls are produced instead of the answer when the request has function tools, tool_choice
// is not "none", the input does not end with function_call_output items, and the last user text
// triggers them, in this order of precedence:
//
//   - it contains "call <name>" for a tool name: each such tool is called, in the tools' order;
//   - it contains "use tools": every function tool is called (parallel calls);
//   - it is about what a tool names, as a real model would call get_weather for "What's the weather
//     like in San Francisco?": each such tool is called, in the tools' order. The text is about a
//     tool when one of its words equals one of the tool's topic words, or is that word with an "s"
//     or "es" more or less. The topic words are the words of the tool's name (split at anything but
//     letters and digits and at camelCase humps) of 3 letters or more, and the words of its
//     description of 4 letters or more, all lowercased, less the generic words that say what a
//     tool does rather than what it is about (get, list, search, current, information, the, for…:
//     genericWords in toolcall.go);
//
// or tool_choice forces it ("required": the triggered tools or else the first tool;
// {"type":"function","name":X}: X; parser path only, harmony answers 501). parallel_tool_calls:false
// keeps only the first call.
//
// The arguments fit the tool's parameters schema. The object holds the schema's required members in
// order; with none, its first property; with no properties either, {"query": …} (or {} when
// additionalProperties is false). Each value fits its member's schema: const, else the first enum
// value the text names as a word (else the first enum value), else the first alternative of
// anyOf/oneOf that is not null, else by type (the first non-null type of a list): a string is the
// last user text with its whitespace collapsed; an integer or number is the first number written in
// the text, else the minimum, else 1, kept within minimum and maximum; a boolean is true; an array
// holds one value of its items; an object is built like the top one (but {} without properties);
// null is null. For a tool called because the text is about it, a string member whose name holds
// location, city, place, address, country, region, town or destination gets the first run of
// capitalised words after "in", "at", "near" or "for" ("San Francisco"), when there is one. So
// {"type":"object","properties":{"location":{"type":"string"}},"required":["location"]} gets
// {"location":"San Francisco"} for the question above, and {"location":"Please call get_weather"}
// for "Please call get_weather".
// On the parser path a short text "Calling <name>[, <name>…]." precedes the calls (the
// (reasoning)?(text)?(tool call)* pattern); harmony emits reasoning then the calls.
//
// Tokens are whitespace-separated words that keep their trailing whitespace; each token is one delta
// event. Usage: output_tokens counts the generated tokens (reasoning, text and argument tokens),
// reasoning_tokens the reasoning ones, input_tokens is 3 + the words of instructions + for every input
// item 3 + the words of its texts (message text, reasoning text, arguments, output), cached_tokens is
// 0 (or the prefix cache's hit, below), total_tokens the sum. Harmony reports one turn in the
// *_per_turn arrays; the parser path reports empty arrays (vLLM's SimpleContext keeps no turn metrics).
//
// With Options.PrefixCacheBlocks set, a Sim models vLLM's automatic prefix caching (prefix.go,
// docs/fleet.md): the prompt's tokens, in the order input_tokens counts them (3 of framing, the
// instructions' words, then per item 3 of framing and its words; /tokenize lists the same ids), are
// cut into 16-token blocks whose hashes are chained over the whole prefix and kept in an LRU of that
// many blocks. cached_tokens is the prompt's leading run of cached blocks (one block less when the
// whole prompt is cached: vLLM recomputes the last token); then every full block of the prompt is
// cached. The time to the first token is Options.PrefillBase + uncached tokens ×
// Options.PrefillPerToken, and Options.DecodePerToken paces each delta when delay_ms does not. For
// a given order of requests all of it is deterministic.
//
// Ids are random (uuid4-shaped, as vLLM's random_uuid) unless Options.Seed is set, which makes every id
// a function of the seed and the request's arrival number, and created_at comes from Options.Now.
package vllmsim
