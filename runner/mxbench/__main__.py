from mxbench.cli import main

main()
