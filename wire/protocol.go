package wire

import "strings"

// EventType is the type of a Responses stream event: the SSE "event" field, equal to the JSON
// "type" member (docs/wire.md §5.2). Every event type respgate reads or writes is named here once.
type EventType string

// Event types of the client stream and of vLLM's stream.
const (
	EventCreated         EventType = "response.created"
	EventQueued          EventType = "response.queued"
	EventInProgress      EventType = "response.in_progress"
	EventCompleted       EventType = "response.completed"
	EventIncomplete      EventType = "response.incomplete"
	EventFailed          EventType = "response.failed"
	EventItemAdded       EventType = "response.output_item.added"
	EventItemDone        EventType = "response.output_item.done"
	EventPartAdded       EventType = "response.content_part.added"
	EventPartDone        EventType = "response.content_part.done"
	EventSummaryAdded    EventType = "response.reasoning_summary_part.added"
	EventSummaryDone     EventType = "response.reasoning_summary_part.done"
	EventTextDelta       EventType = "response.output_text.delta"
	EventTextDone        EventType = "response.output_text.done"
	EventAnnotation      EventType = "response.output_text.annotation.added"
	EventRefusalDelta    EventType = "response.refusal.delta"
	EventRefusalDone     EventType = "response.refusal.done"
	EventReasoningDelta  EventType = "response.reasoning_text.delta"
	EventReasoningDone   EventType = "response.reasoning_text.done"
	EventSummaryDelta    EventType = "response.reasoning_summary_text.delta"
	EventSummaryTextDone EventType = "response.reasoning_summary_text.done"
	EventArgsDelta       EventType = "response.function_call_arguments.delta"
	EventArgsDone        EventType = "response.function_call_arguments.done"
	EventError           EventType = "error"

	// vLLM-only events (docs/wire.md §6.5): its reasoning parts, which the accumulator rewrites to
	// content parts, and events of tools respgate does not serve, which it drops.
	EventVLLMReasoningPartAdded EventType = "response.reasoning_part.added"
	EventVLLMReasoningPartDone  EventType = "response.reasoning_part.done"
	EventCustomToolDelta        EventType = "response.custom_tool_call_input.delta"
	EventCustomToolDone         EventType = "response.custom_tool_call_input.done"
	EventMCPArgsDelta           EventType = "response.mcp_call_arguments.delta"
	EventMCPArgsDone            EventType = "response.mcp_call_arguments.done"
	EventKeepalive              EventType = "keepalive"
)

// EventTypes lists every named event type.
var EventTypes = []EventType{
	EventCreated, EventQueued, EventInProgress, EventCompleted, EventIncomplete, EventFailed,
	EventItemAdded, EventItemDone, EventPartAdded, EventPartDone, EventSummaryAdded, EventSummaryDone,
	EventTextDelta, EventTextDone, EventAnnotation, EventRefusalDelta, EventRefusalDone,
	EventReasoningDelta, EventReasoningDone, EventSummaryDelta, EventSummaryTextDone,
	EventArgsDelta, EventArgsDone, EventError,
	EventVLLMReasoningPartAdded, EventVLLMReasoningPartDone, EventCustomToolDelta, EventCustomToolDone,
	EventMCPArgsDelta, EventMCPArgsDone, EventKeepalive,
}

// IsDelta reports whether t carries a piece of generated output (any *.delta event).
func (t EventType) IsDelta() bool { return strings.HasSuffix(string(t), ".delta") }

// Terminal reports whether t ends a response's stream (completed, incomplete or failed).
func (t EventType) Terminal() bool {
	return t == EventCompleted || t == EventIncomplete || t == EventFailed
}

// Status is a response's status (and, for completed/incomplete/in_progress, an item's).
type Status string

// Response statuses.
const (
	StatusQueued     Status = "queued"
	StatusInProgress Status = "in_progress"
	StatusCompleted  Status = "completed"
	StatusIncomplete Status = "incomplete"
	StatusFailed     Status = "failed"
	StatusCancelled  Status = "cancelled"
)

// Terminal reports whether s is final (completed, incomplete, failed, cancelled).
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusIncomplete, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// TerminalEvent is the stream event that ends a response with status s: response.completed,
// response.incomplete, or response.failed for any other status.
func (s Status) TerminalEvent() EventType {
	switch s {
	case StatusCompleted:
		return EventCompleted
	case StatusIncomplete:
		return EventIncomplete
	}
	return EventFailed
}

// Content part types.
const (
	PartOutputText    = "output_text"
	PartRefusal       = "refusal"
	PartReasoningText = "reasoning_text"
	PartSummaryText   = "summary_text"
)

// ToolName is the client-facing identity of a function tool declared inside a namespace tool
// (the flat name vLLM sees maps back to it).
type ToolName struct {
	Namespace string
	Name      string
}

// ErrorObject is a failed response's error member {"code","message"}. Message is safe to show a
// client.
type ErrorObject struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
