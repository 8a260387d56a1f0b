"""Where and as which process the code runs: the device, the host's memory, the rank of a launch."""
