from stratamem.cli import main

main()
