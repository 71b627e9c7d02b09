"""Device data: the replay buffer, the packed device-to-device transfers, rollouts."""
