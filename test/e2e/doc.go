// Package e2e holds end-to-end tests that drive a real Capstan server with
// the clients users run: the AWS CLI, the Go SDK and raw signed HTTP.
package e2e
