package control

import "github.com/capstanhq/capstan/internal/api"

func (s *Service) registerDaemonTaskDefinitions(h *api.Handler) {}
