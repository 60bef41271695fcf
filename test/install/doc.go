// Package install tests the ways to install the agent on a machine, with
// the real tools: the .deb that tools/mkdeb builds, installed with dpkg into
// a Debian container, and the image packaging/Dockerfile describes, built
// with `docker build` and run against this machine's Docker Engine.
package install
