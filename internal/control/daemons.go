package control

import "github.com/capstanhq/capstan/internal/api"

func (s *Service) registerDaemons(h *api.Handler) {}
