"""What the tests share: fixtures, simulated services and builders of test inputs."""
