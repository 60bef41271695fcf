// Package fault classifies the errors the control plane returns to API
// callers. Every error that leaves a service method is either a *fault.Error
// or treated as internal; the API layer maps kinds to wire names in one place.
package fault

import (
	"errors"
	"fmt"
)

// Kind is the class of an error, independent of the wire name.
type Kind int

const (
	Internal Kind = iota
	InvalidParameter
	Client
	NotFound
	Conflict
	NotAuthorized
	Throttled
	Unsupported
)

func (k Kind) String() string {
	switch k {
	case InvalidParameter:
		return "invalid parameter"
	case Client:
		return "client"
	case NotFound:
		return "not found"
	case Conflict:
		return "conflict"
	case NotAuthorized:
		return "not authorized"
	case Throttled:
		return "throttled"
	case Unsupported:
		return "unsupported"
	}
	return "internal"
}

// Error is a classified error. Code, when set, is the exact ECS exception
// name to report (e.g. DaemonNotFoundException); otherwise the kind decides.
type Error struct {
	Kind    Kind
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// As returns the classified error in err's chain, or nil.
func As(err error) *Error {
	var fe *Error
	if errors.As(err, &fe) {
		return fe
	}
	return nil
}

// KindOf returns the kind of err (Internal when unclassified).
func KindOf(err error) Kind {
	if fe := As(err); fe != nil {
		return fe.Kind
	}
	return Internal
}

// Invalid reports a request member that breaks a rule: "field: rule".
func Invalid(field, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	return &Error{Kind: InvalidParameter, Message: msg}
}

// ClientError reports a request the caller must change (ECS ClientException).
func ClientError(format string, args ...any) *Error {
	return &Error{Kind: Client, Message: fmt.Sprintf(format, args...)}
}

// Missing reports an unknown resource; code is the ECS exception to use,
// empty for the generic one.
func Missing(code, format string, args ...any) *Error {
	return &Error{Kind: NotFound, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Conflicting reports a request that clashes with current state.
func Conflicting(code, format string, args ...any) *Error {
	return &Error{Kind: Conflict, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Denied reports a caller that may not do what it asked.
func Denied(format string, args ...any) *Error {
	return &Error{Kind: NotAuthorized, Message: fmt.Sprintf(format, args...)}
}

// Unsupported reports a valid request for a feature Capstan does not run.
func NotSupported(format string, args ...any) *Error {
	return &Error{Kind: Unsupported, Message: fmt.Sprintf(format, args...)}
}

// WithCode returns a copy of e that reports the given ECS exception name.
func (e *Error) WithCode(code string) *Error {
	c := *e
	c.Code = code
	return &c
}
