"""What several studies share: the Fashion-MNIST loop, runs over seeds, tables and plots."""
