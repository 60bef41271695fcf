package auth

import (
	"fmt"
	"net/http"
)

// Error codes, spelled as AWS JSON services spell them so SDKs and the CLI
// recognise them.
const (
	CodeMissingAuthenticationToken = "MissingAuthenticationTokenException"
	CodeIncompleteSignature        = "IncompleteSignatureException"
	CodeUnrecognizedClient         = "UnrecognizedClientException"
	CodeInvalidSignature           = "InvalidSignatureException"
)

// Error is a refused request. Code and Message go to the caller as the
// error's __type and message; Status is the HTTP status. Messages never carry
// secrets or the caller's signature.
type Error struct {
	Code    string
	Message string
	Status  int
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// All of these are 400: AWS JSON-protocol services (ECS, ECR, DynamoDB)
// answer authentication failures with 400, unlike REST services' 403.
func newError(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Status: http.StatusBadRequest}
}

func errMissingToken() *Error {
	return newError(CodeMissingAuthenticationToken, "Missing Authentication Token")
}

func errIncomplete(format string, args ...any) *Error {
	return newError(CodeIncompleteSignature, format, args...)
}

func errUnrecognized() *Error {
	return newError(CodeUnrecognizedClient, "The security token included in the request is invalid.")
}

func errInvalid(format string, args ...any) *Error {
	return newError(CodeInvalidSignature, format, args...)
}

func errMismatch() *Error {
	return errInvalid("The request signature we calculated does not match the signature you provided. " +
		"Check your AWS Secret Access Key and signing method.")
}
